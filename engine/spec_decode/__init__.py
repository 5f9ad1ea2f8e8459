"""Speculative decoding: a proposer offers draft tokens per decoding sequence, the step verifies them as extra
query tokens in the packed forward, and acceptance plus KV rollback happen before the next schedule."""
