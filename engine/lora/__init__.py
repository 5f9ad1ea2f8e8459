"""LoRA adapters: PEFT folders read into rank-padded weight slots; each scheduled row carries an adapter slot and
the wrapped linears add x @ A[slot] @ B[slot] * scale for its rows, batched over rows."""
