"""Foreign kernels: the second corpus (native CUDA) and fla's own kernels, audited on real hardware."""
