"""What a process runs with: settings, the clock, GC tuning, the metrics endpoint."""
