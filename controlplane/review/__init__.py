"""Human review of sampled results: the sampler, the blind queue, labels, route accuracy,
reviewer agreement and comparator calibration (docs/review.md)."""
