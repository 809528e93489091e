"""Beyond one machine: the Prometheus exporter (``gputui exporter``).

- :mod:`~gputui.exporter.exposition`: metric families and the text format.
- :mod:`~gputui.exporter.gpu_metrics`: a snapshot's GPU, MIG and process series.
- :mod:`~gputui.exporter.jobs`: every hooked training job of the node (the only
  module that talks to hooks).
- :mod:`~gputui.exporter.train_metrics`: the training series of those jobs.
- :mod:`~gputui.exporter.collector`: one scrape's families from the latest values.
- :mod:`~gputui.exporter.server`: ``/metrics`` and a landing page over HTTP.

No module here imports textual; none calls NVML on a scrape.
"""
