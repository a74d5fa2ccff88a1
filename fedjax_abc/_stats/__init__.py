"""Statistics of Monte Carlo results: paired differences, several methods at once, bootstrap
summaries, trial counts from power, and precision-targeted runs (``fedjax_abc.stats``)."""
