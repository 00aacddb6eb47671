"""The pipeline's parts, one job each; ``gpu_workers.evaluator`` runs them in order.

- ``plan``: what both children are asked for alike (weight configurations, input sets and the outputs
  kept whole, the timing's options, the device as a child names it);
- ``accounting``: where an evaluation's time and CPU went (timeline, CPU by who, a timing's wall-clock
  span), kept with every result;
- ``reference``: the trusted reference child's phase (seeds, inputs, outputs, baseline timings);
- ``candidate``: the candidate child: started early, warmed, bounded per stretch, its messages in order;
- ``verdict``: the evidence judged into findings, status and speedups; the result finished with its reward.
"""
