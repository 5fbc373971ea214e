"""rtgate: a latency-budget gate that makes language models feel real-time."""
