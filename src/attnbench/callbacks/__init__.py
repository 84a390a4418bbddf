"""Lightning callbacks: run statistics, attention diagnostics, progress bars, fault guards, resume state."""
