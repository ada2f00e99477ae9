"""Chapter 8 ("Profile your own model"): sizes only. The chapter computes in front of the reader
(seconds at every scale) and reads no stored experiment, so nothing is registered here."""
from __future__ import annotations

#: Chapter 8's sizes per scale: ``N`` (exact profiles of the three models), ``N_brute`` (the
#: batch-one brute force the adapter is checked against), ``N_big`` and ``n_samples`` (the
#: sampled profile of the BERT), ``n_compare`` (strings of the two models' sampled profiles at
#: ``N`` that the chapter compares and plots).
SIZES = {
    "ci": dict(N=8, N_brute=6, N_big=256, n_samples=8, n_compare=200),
    "book": dict(N=10, N_brute=6, N_big=256, n_samples=32, n_compare=400),
    "paper": dict(N=14, N_brute=8, N_big=1024, n_samples=1000, n_compare=4000),
}
