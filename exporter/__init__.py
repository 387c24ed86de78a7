"""hybrid-cache-exporter: Prometheus metrics for the two cache pools of hybrid linear-attention
models served by SGLang and vLLM, read from the servers' own logs."""

__version__ = "0.1.0"
DEFAULT_PORT = 19833  # outside 9100-9999, which the Prometheus port registry has handed out
