"""Readers of formats that arrive from outside (tar headers so far), bounded in size and
depth and strict about what they accept. The lowest layer: they import nothing of airgap
but its errors, so every package above may use them."""
