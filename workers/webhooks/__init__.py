"""The webhook delivery loop: fan-out of feed items into deliveries, and their attempts."""
