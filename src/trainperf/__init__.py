"""trainperf: measure and explain how fast a Transformer language model trains."""

__version__ = "0.1.0"
