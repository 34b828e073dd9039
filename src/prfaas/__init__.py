"""prfaas: Prefill-as-a-Service, cross-datacenter PD-disaggregated LLM serving.

An open implementation of arXiv 2604.15039.
"""

__version__ = "0.1.0"
