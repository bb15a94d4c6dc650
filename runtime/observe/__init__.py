"""What the runtime measures and concludes, as pure data: latency histograms, statistics
records, the metrics store, grouped exceptions, health decisions."""
