"""tff_quant: TFF aggregation factories for DP via randomized quantization."""
