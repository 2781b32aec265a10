"""Keys, sealing and randomness: the key ring, the secret store, sealed blobs."""
