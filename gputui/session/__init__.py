"""Sessions without a screen.  With a hooked job: the attach model (what a
screen or a report shows of one job), the feeds that bring a live job's or a
recording's events, the rank view's model, and the one evidence builder the
analyzer reads from all of them.  With this machine's GPUs: the monitor's
session (``monitor``: history, findings, replay progress, the poller) and its
process views (``process_view``, ``process_sort``, ``container_text``).
Headless commands and the Textual screens both stand on them."""
