"""The cluster screen: nodes, GPUs and training jobs read from Prometheus."""
