"""lethe.kernels.gdn.bench on the CPU: the FLOP and byte counts of the chunked algorithm against an independent
tally of its matrix products, the cell size rule, and the correctness gate a benchmark cell passes before it is
timed."""

import pytest
from lethe.kernels.gdn import bench


def _products(erase, C, K, V):
    """The matrix products of docs/gdn.md §2, listed one by one as (m, n, k): an independent tally."""
    fwd = [(C, C, K), (C, K, C), (C, V, C), (C, V, K), (K, V, C), (C, C, K), (C, V, K), (C, V, C)] if erase else [
        (K, V, C), (C, C, K), (C, V, K), (C, V, C)]
    # forward, erase: A, W = T X, U~ = T U, delta = U~ - W S, S += Kend^T delta, P, Qg S, P delta
    bwd_common = [(C, V, C),  # d delta = P^T dO
                  (C, V, K),  # + Kend dS
                  (K, V, C),  # dS += Qg^T dO
                  (C, C, V),  # dP = dO delta^T
                  (C, K, V),  # d(qG) = dO S^T
                  (C, K, V),  # dKend = delta dS^T
                  (C, K, C),  # dQg += dP Kg
                  (C, K, C)]  # dKg = dP^T Qg
    bwd_erase = [(K, V, C),  # dS -= W^T d delta
                 (C, K, V),  # dW = -d delta S^T
                 (C, C, K), (C, C, V),  # dT = dW X^T + d delta U^T
                 (C, K, C),  # dX = T^T dW
                 (C, V, C),  # dU = T^T d delta
                 (C, C, C), (C, C, C),  # dA = -T^T dT T^T
                 (C, K, C), (C, K, C)]  # dX += dA Kg, dKg += dA^T X
    bwd = bwd_common + (bwd_erase if erase else [])
    tally = lambda ps: sum(2 * m * n * k for m, n, k in ps)  # noqa: E731
    return tally(fwd) + ((2 * C**3) // 3 if erase else 0), tally(bwd)




@pytest.mark.parametrize("erase", [True, False])
@pytest.mark.parametrize("C,K,V", [(64, 128, 128), (64, 128, 64), (16, 32, 16)])
def test_chunk_flops_match_the_product_list(erase, C, K, V):
    fwd, bwd = _products(erase, C, K, V)
    got = bench.chunk_flops(erase, C, K, V)
    assert got == {"fwd": fwd, "bwd": bwd}


def test_chunk_flops_hand_value():
    # GDN, d_k = d_v = 128, chunk 64: 8 C^2 V + 12 C K V + 12 C^2 K + 4 C^3
    assert bench.chunk_flops(True, 64, 128, 128)["bwd"] == 24_117_248


def test_counts_scale_with_heads_and_pad_to_chunks():
    one = bench.chunk_counts("gdn", 1, 1, 64, 128, 128)
    assert one["chunks"] == 1 and one["bwd_flops"] == 24_117_248
    big = bench.chunk_counts("gdn", 3, 2, 64 * 5, 128, 128)
    assert big["chunks"] == 30 and big["bwd_flops"] == 30 * one["bwd_flops"]
    assert big["bwd_bytes"] == 30 * one["bwd_bytes"]
    pad = bench.chunk_counts("gdn", 1, 1, 65, 128, 128)  # FLOPs of two whole chunks, bytes of 65 real steps
    assert pad["chunks"] == 2 and pad["bwd_flops"] == 2 * one["bwd_flops"]
    assert pad["bwd_bytes"] == one["bwd_bytes"] * 65 // 64


def test_minimal_bytes_by_hand():
    c = bench.chunk_counts("gdn", 1, 1, 64, 128, 128, in_bytes=2)
    # inputs q, k, g, b (K) and v, w (V): 768 elements per step; backward reads them + dO, writes 768 grads
    assert c["bwd_bytes"] == 64 * (768 + 128 + 768) * 2 == 212_992
    assert c["fwd_bytes"] == 64 * (768 + 128) * 2 == 114_688
    assert c["bwd_bytes_with_states"] == 212_992 + 3 * 128 * 128 * 4
    s = bench.chunk_counts("sgdn", 1, 1, 64, 128, 128, in_bytes=2)  # q, k (K), v (V), g and beta scalar per step
    assert s["bwd_bytes"] == 64 * (2 * (128 + 128 + 128 + 1 + 1) + 128) * 2
    la = bench.chunk_counts("la", 1, 1, 64, 128, 64)
    assert la["bwd_flops"] == bench.chunk_flops(False, 64, 128, 64)["bwd"]


def test_bench_batch_gives_the_requested_head_tokens():
    """B * H * T is the requested head-token count (at least one sequence), so cells of every T do equal work."""
    assert bench.bench_batch(2**20, 2, 1024) == 512 and bench.bench_batch(2**20, 2, 32768) == 16
    assert bench.bench_batch(10, 2, 1024) == 1


def test_gate():
    """An impl is timed only if its check passes: the float64 slice judges where it exists, else ours."""
    base = {"member": "gdn"}
    sl = {"ours": {"o": 1e-3, "dq": 3e-3}, "fla": {"o": 2e-2, "dq": 9e-2}, "native": {"o": 1e-3}}
    row = bench.check_row(base, {"fla": {"o": 1e-2}, "native": {"o": 1e-3}}, {"ours": 0, "fla": 0, "native": 0}, sl, 0.05)
    assert row["vs_ours"]["impl"] == "fla" and set(row["vs_ours_by_impl"]) == {"fla", "native"}
    assert list(row["gate"]["failed"]) == ["fla"] and "9.00e-02 (dq) vs the float64 slice" in row["gate"]["failed"]["fla"]
    assert bench.check_row(base, {"fla": {"o": 1e-2}}, {"ours": 0, "fla": 0}, sl, 0.1)["gate"]["failed"] == {}
    # no slice (long T): judged against ours; ours itself only on non-finite values
    row = bench.check_row(base, {"fla": {"o": 0.2}, "native": {"o": 1e-3}}, {"ours": 0, "fla": 0, "native": 2},
                       {"skipped": "T > 16384"}, 0.05)
    assert set(row["gate"]["failed"]) == {"fla", "native"} and "vs ours" in row["gate"]["failed"]["fla"]
    assert "2 non-finite" in row["gate"]["failed"]["native"]
    assert bench.check_row(base, {"fla": {"o": 0.2}}, {"ours": 0, "fla": 0}, {"skipped": "x"}, 0)["gate"]["failed"] == {}
