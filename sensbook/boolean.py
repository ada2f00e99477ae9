"""Boolean functions on {0,1}^N as batched callables, with exact sensitivity profiles.

A string ``x`` is a tensor of shape ``(..., N)`` with entries 0/1 (any dtype). Position ``n``
of the paper (1-based) is column ``n - 1``. The index of a string is
``sum_n x_n 2^(n-1)``, so flipping bit ``n`` is ``index ^ (1 << (n-1))``: this is how the
profiler finds Hamming neighbours without building them.

Every function here knows its exact profile ``K_k(N) = #{x : s(f, x) = k}`` in closed form
(Section 2 of Kövér et al., 2026); the tests check each against brute force.
"""
from __future__ import annotations

from math import comb, isfinite
from numbers import Integral, Real

import numpy as np
import torch

#: The largest N for which exhaustive work over all 2^N strings is allowed.
MAX_EXHAUSTIVE_N = 24


def _scalar(value):
    """A 0-d numpy array or torch tensor as the Python number it holds; anything else as is."""
    if isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim == 0:
        return value.item()
    return value


def check_int(value, argument, *, minimum=None, maximum=None) -> int:
    """An integral scalar (Python or numpy int or a 0-d array or tensor of one, never bool or a
    float such as 2.0) in ``[minimum, maximum]``, as a Python int; otherwise an error naming
    ``argument``."""
    value = _scalar(value)
    lo = "" if minimum is None else f" >= {minimum}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral):
        raise TypeError(f"{argument} must be an integer{lo}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{argument} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{argument}={value} is too large here: allowed {argument} <= {maximum}")
    return value


def check_real(value, argument, *, minimum=None, strict=False) -> float:
    """A finite real scalar (Python or numpy int/float or a 0-d array or tensor of one, never
    bool) ``>= minimum`` (``>`` when ``strict``), as a Python float; otherwise an error naming
    ``argument``."""
    value = _scalar(value)
    rel = ">" if strict else ">="
    lo = "" if minimum is None else f" {rel} {minimum}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise TypeError(f"{argument} must be a finite number{lo}, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not isfinite(value) or (minimum is not None and (value <= minimum if strict else value < minimum)):
        raise ValueError(f"{argument} must be a finite number{lo}, got {value!r}")
    return value


#: The largest memory budget accepted (MiB): 1 PiB, more than any machine has; a larger
#: ``memory_mb`` is a unit mistake, and its bytes would overflow the chunk arithmetic.
MAX_MEMORY_MB = float(2**30)


def check_memory_mb(memory_mb, argument="memory_mb") -> float:
    """A memory budget in MiB: a finite number > 0 and at most ``MAX_MEMORY_MB``."""
    memory_mb = check_real(memory_mb, argument, minimum=0, strict=True)
    if memory_mb > MAX_MEMORY_MB:
        raise ValueError(f"{argument}={memory_mb:g} is more than any machine has: a budget in MiB "
                         f"must be > 0 and at most {MAX_MEMORY_MB:.0f} (1 PiB), e.g. 256")
    return memory_mb


def check_seed(seed, argument="seed") -> int:
    """A seed: an integer in [0, 2^63) (what ``torch.Generator.manual_seed`` keeps exactly)."""
    return check_int(seed, argument, minimum=0, maximum=2**63 - 1)


def check_n(N, *, argument="N", maximum=None) -> int:
    """Validate a string length: an integer >= 1 (and <= ``maximum`` when given)."""
    return check_int(N, argument, minimum=1, maximum=maximum)


def check_strings(x, N=None, *, argument="x") -> torch.Tensor:
    """Validate a batch of binary strings: a tensor of shape (..., N) with entries in {0, 1}."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"{argument} must have shape (..., N) with N >= 1, got {tuple(x.shape)}")
    if N is not None and x.shape[-1] != N:
        raise ValueError(f"{argument} has length {x.shape[-1]} in its last axis, expected N={N}")
    if x.is_floating_point() and not torch.isfinite(x).all():
        raise ValueError(f"{argument} must be binary (0/1); it has non-finite entries")
    if x.numel() and not ((x == 0) | (x == 1)).all():
        bad = x[(x != 0) & (x != 1)].flatten()[0].item()
        raise ValueError(f"{argument} must be binary (entries 0 or 1); found {bad!r}")
    return x


def strings(N: int, start: int = 0, stop: int | None = None, *, device=None, dtype=torch.float32):
    """The binary strings of length ``N`` with indices ``start`` to ``stop - 1``, in order.

    Parameters
    ----------
    N : int
        The string length, 1 to 62.
    start : int
        The first index, ``0 <= start <= stop``.
    stop : int or None
        One past the last index, at most ``2**N`` (default ``2**N``: every string).
    device : torch.device or str or None
        Where the tensor is made (default: torch's default device).
    dtype : torch.dtype
        The entries' type (default float32).

    Returns
    -------
    torch.Tensor
        Shape ``(stop - start, N)``, entries 0 and 1; bit ``n`` (1-based) of string ``i`` is
        ``(i >> (n - 1)) & 1``: the index of a string is ``sum_n x_n 2^(n-1)``, column 0 (the
        paper's position 1) the lowest bit, so row ``i`` of ``strings(N)`` has index ``i``.
    """
    N = check_n(N, maximum=62)
    stop = 2**N if stop is None else check_int(stop, "stop", minimum=0, maximum=2**N)
    start = check_int(start, "start", minimum=0, maximum=stop)
    idx = torch.arange(start, stop, device=device, dtype=torch.int64)
    return index_to_strings(idx, N, dtype=dtype)


def index_to_strings(idx: torch.Tensor, N: int, *, dtype=torch.float32) -> torch.Tensor:
    """The strings of integer indices: ``x[..., n-1] = (idx >> (n-1)) & 1``.

    Parameters
    ----------
    idx : torch.Tensor
        Integer indices, any shape ``(...)``.
    N : int
        The string length.
    dtype : torch.dtype
        The entries' type (default float32).

    Returns
    -------
    torch.Tensor
        Shape ``(..., N)``, entries 0 and 1.
    """
    shifts = torch.arange(N, device=idx.device, dtype=torch.int64)
    return ((idx.unsqueeze(-1) >> shifts) & 1).to(dtype)


def strings_to_index(x: torch.Tensor) -> torch.Tensor:
    """The index of each string: the inverse of :func:`index_to_strings`.

    Parameters
    ----------
    x : torch.Tensor
        Binary strings, shape ``(..., N)`` with ``N <= 62``.

    Returns
    -------
    torch.Tensor
        int64 indices, shape ``(...)``.
    """
    x = check_strings(x)
    if x.shape[-1] > 62:
        raise ValueError(f"x has length {x.shape[-1]}: an int64 index holds strings of length <= 62")
    w = 2 ** torch.arange(x.shape[-1], device=x.device, dtype=torch.int64)
    return (x.to(torch.int64) * w).sum(-1)


def _check_positions(S, argument="S") -> tuple:
    """A non-empty set of 1-based positions (integers >= 1), sorted."""
    try:
        items = list(S)
    except TypeError:
        raise TypeError(f"{argument} must be a non-empty collection of positions >= 1, got {S!r}") from None
    if not items:
        raise ValueError(f"{argument} must be a non-empty set of positions >= 1, got {S!r}")
    return tuple(sorted({check_int(s, f"each position in {argument}", minimum=1) for s in items}))


def _positions(S, N) -> list[int]:
    """1-based positions S as 0-based columns, checked against N."""
    cols = [s - 1 for s in S]
    if N is not None and max(S) > N:
        raise ValueError(f"this function reads position {max(S)}, so it needs N >= {max(S)}; got N={N}")
    return cols


class BooleanFunction:
    """A Boolean function on :math:`\\{0,1\\}^N` for every ``N`` it is defined on.

    Call it on strings of shape ``(..., N)`` (entries 0/1) to get a bool tensor of shape
    ``(...)``. :meth:`profile` gives the exact sensitivity profile :math:`K_0, \\dots, K_N`.
    """

    name = "f"

    def __call__(self, x) -> torch.Tensor:
        x = check_strings(x)
        self._check_n(x.shape[-1])
        return self._eval(x)

    def _check_n(self, N):
        check_n(N)

    def _eval(self, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def profile(self, N: int) -> np.ndarray:
        """The exact sensitivity profile: :math:`K_k` strings have sensitivity ``k``.

        Parameters
        ----------
        N : int
            The string length, 1 to 62 (and one the function is defined on).

        Returns
        -------
        numpy.ndarray
            int64, shape ``(N + 1,)``: ``K[k]`` for ``k = 0..N``.
        """
        N = check_n(N, maximum=62)
        self._check_n(N)
        return self._profile(N)

    def K0(self, N: int) -> int:
        """The number of zero-sensitivity strings, :math:`K_0(N)`.

        Parameters
        ----------
        N : int
            The string length.
        """
        return int(self.profile(N)[0])

    def average_sensitivity(self, N: int) -> float:
        """The average sensitivity, :math:`\\mathrm{as}(f) = \\sum_k k K_k / 2^N`.

        Parameters
        ----------
        N : int
            The string length.
        """
        K = self.profile(N)
        return float(np.dot(np.arange(N + 1), K) / 2.0**N)

    def max_sensitivity(self, N: int) -> int:
        """The largest sensitivity of any string, :math:`\\max_x s(f, x)`.

        Parameters
        ----------
        N : int
            The string length.
        """
        K = self.profile(N)
        return int(np.nonzero(K)[0].max())

    def __repr__(self):
        return self.name


def _junta_profile(N, m, small):
    """Profile of a function reading m of N bits, from its profile `small` on those m bits."""
    K = np.zeros(N + 1, dtype=np.int64)
    K[: m + 1] = np.asarray(small, dtype=np.int64) * 2 ** (N - m)
    return K


def _threshold_profile(m, t):
    """Profile of x -> [|x| >= t] on m bits, 1 <= t <= m.

    Weight t: flipping any of its t ones drops below t, s = t. Weight t-1: flipping any of its
    m-t+1 zeros reaches t, s = m-t+1. Every other weight has s = 0.
    """
    K = np.zeros(m + 1, dtype=np.int64)
    K[t] += comb(m, t)
    K[m - t + 1] += comb(m, t - 1)
    K[0] += 2**m - comb(m, t) - comb(m, t - 1)
    return K


class Parity(BooleanFunction):
    """PARITY, or m-SPARSE PARITY on some positions.

    Parameters
    ----------
    S : collection of int or None
        The 1-based positions read (default None: every position).
    name : str or None
        The name it prints with (default: ``PARITY`` or ``m-SPARSE PARITY[...]``).

    Notes
    -----
    :math:`f(x) = \\sum_{n \\in S} x_n \\bmod 2`. Every string has :math:`s = |S|`, so
    :math:`K_{|S|} = 2^N` and :math:`K_0 = 0`. DICTATOR and FIRST are the case :math:`|S| = 1`
    (see :class:`Dictator`).
    """

    def __init__(self, S=None, name=None):
        self.S = None if S is None else _check_positions(S)
        self.name = name or ("PARITY" if S is None else f"{len(self.S)}-SPARSE PARITY{list(self.S)}")

    def _check_n(self, N):
        check_n(N)
        if self.S is not None:
            _positions(self.S, N)

    def _eval(self, x):
        cols = slice(None) if self.S is None else _positions(self.S, None)
        return (x[..., cols].to(torch.int64).sum(-1) % 2) == 1

    def _profile(self, N):
        m = N if self.S is None else len(self.S)
        small = np.zeros(m + 1, dtype=np.int64)
        small[m] = 2**m
        return _junta_profile(N, m, small)


class Dictator(Parity):
    """DICTATOR :math:`x_i`; FIRST is ``Dictator(1)``. Every string has :math:`s = 1`, so
    :math:`K_0 = 0`.

    Parameters
    ----------
    i : int
        The 1-based position read.
    name : str or None
        The name it prints with (default ``FIRST`` for ``i = 1``, else ``DICTATOR(i)``).
    """

    def __init__(self, i: int, name=None):
        if check_int(i, "i (a position)") < 1:
            raise ValueError(f"i must be a position >= 1, got {i!r}")
        i = int(i)
        super().__init__((i,), name=name or ("FIRST" if i == 1 else f"DICTATOR({i})"))


class Majority(BooleanFunction):
    """MAJORITY, or m-SPARSE MAJORITY on some positions.

    Parameters
    ----------
    S : collection of int or None
        The 1-based positions read (default None: every position).
    name : str or None
        The name it prints with (default: ``MAJORITY`` or ``m-SPARSE MAJORITY[...]``).

    Notes
    -----
    :math:`f(x) = 1` iff strictly more than half of the ``m`` bits read are 1, i.e. the weight
    is at least :math:`\\lfloor m/2 \\rfloor + 1`. For odd ``m`` this is the usual majority; for
    even ``m`` a tie is rejected (our convention). For odd ``N``,
    :math:`K_0 = 2^N - 2 \\binom{N}{(N-1)/2}`.
    """

    def __init__(self, S=None, name=None):
        self.S = None if S is None else _check_positions(S)
        self.name = name or ("MAJORITY" if S is None else f"{len(self.S)}-SPARSE MAJORITY{list(self.S)}")

    _check_n = Parity._check_n

    def _eval(self, x):
        cols = slice(None) if self.S is None else _positions(self.S, None)
        bits = x[..., cols].to(torch.int64)
        m = bits.shape[-1]
        return bits.sum(-1) >= m // 2 + 1

    def _profile(self, N):
        m = N if self.S is None else len(self.S)
        return _junta_profile(N, m, _threshold_profile(m, m // 2 + 1))


class Constant(BooleanFunction):
    """A constant function: every string has :math:`s = 0`, so :math:`K_0 = 2^N`.

    Parameters
    ----------
    value : int
        Its value, 0 or 1.
    """

    def __init__(self, value: int):
        if isinstance(value, (float, np.floating)) or value not in (0, 1):
            raise ValueError(f"value must be 0 or 1, got {value!r}")
        self.value = bool(value)
        self.name = f"CONSTANT {int(value)}"

    def _eval(self, x):
        return torch.full(x.shape[:-1], self.value, dtype=torch.bool, device=x.device)

    def _profile(self, N):
        K = np.zeros(N + 1, dtype=np.int64)
        K[0] = 2**N
        return K


class TruthTable(BooleanFunction):
    """Any function on :math:`\\{0,1\\}^N`, given by its truth table; defined at that ``N`` only.

    Parameters
    ----------
    table : array-like or torch.Tensor
        The value (0 or 1) of each string, by index: 1-D, length :math:`2^N` with ``N >= 1``.
    name : str
        The name it prints with.

    Notes
    -----
    Its profile is counted exactly from the table (there is no closed form).
    """

    def __init__(self, table, name="TRUTH TABLE"):
        t = torch.as_tensor(np.asarray(table) if not isinstance(table, torch.Tensor) else table)
        n = int(t.numel()).bit_length() - 1
        if t.dim() != 1 or t.numel() != 2**n or n < 1:
            raise ValueError(f"table must be 1-D of length 2^N with N >= 1, got shape {tuple(t.shape)}")
        self.table = check_strings(t, argument="table").to(torch.bool).cpu()
        self.N = n
        self.name = name

    def _check_n(self, N):
        if N != self.N:
            raise ValueError(f"this truth table is defined for N={self.N} only, got N={N}")

    def _eval(self, x):
        return self.table.to(x.device)[strings_to_index(x)]

    def _profile(self, N):
        t = self.table.numpy()
        idx = np.arange(2**N)
        s = sum((t != t[idx ^ (1 << b)]).astype(np.int64) for b in range(N))
        return np.bincount(s, minlength=N + 1).astype(np.int64)


def random_function(N: int, seed: int = 0) -> TruthTable:
    """A uniformly random Boolean function on :math:`\\{0,1\\}^N`.

    Parameters
    ----------
    N : int
        The string length, 1 to 24.
    seed : int
        The seed of its table (the same seed gives the same function).

    Returns
    -------
    TruthTable
    """
    N = check_n(N, maximum=MAX_EXHAUSTIVE_N)
    g = torch.Generator().manual_seed(check_seed(seed))
    return TruthTable(torch.randint(0, 2, (2**N,), generator=g), name=f"RANDOM(seed={seed})")


def random_function_expected_profile(N: int) -> np.ndarray:
    """The expected profile of a uniformly random function, :math:`E[K_k] = \\binom{N}{k}`.

    Parameters
    ----------
    N : int
        The string length.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(N + 1,)``.

    Notes
    -----
    Each neighbour's label differs with probability 1/2. In particular :math:`E[K_0] = 1` for
    every ``N``, and :math:`K_0` is approximately Poisson(1), so
    :math:`P(K_0 \\ge 1) \\to 1 - 1/e \\approx 0.632`.
    """
    N = check_n(N)
    return np.array([comb(N, k) for k in range(N + 1)], dtype=np.float64)


def poisson_tv_bound(N: int) -> float:
    """The Chen–Stein bound on :math:`d_{TV}(K_0, \\mathrm{Poisson}(1))` for a uniformly random
    function on :math:`\\{0,1\\}^N`.

    Parameters
    ----------
    N : int
        The string length.

    Notes
    -----
    The event "x has s = 0" depends only on the labels of x and its N neighbours, so events
    of strings more than 2 apart are independent (dependency neighbourhood: the 1 + N + C(N,2)
    strings within distance 2). Each event has probability 2^-N, and two distinct events in a
    neighbourhood hold together with probability 2^-(2N-1) (2N labels must agree). The
    Arratia–Goldstein–Gordon (1989) theorem with lambda = E[K_0] = 1 gives
    d_TV <= b1 + b2 = (1 + N + C(N,2)) / 2^N + 2 (N + C(N,2)) / 2^N.
    """
    N = check_n(N)
    return (1 + 3 * N + 3 * comb(N, 2)) / 2.0**N


PARITY = Parity()
MAJORITY = Majority()
FIRST = Dictator(1)


def sparse_parity(S) -> Parity:
    """m-SPARSE PARITY.

    Parameters
    ----------
    S : collection of int
        The 1-based positions it reads (``m = len(S)``).
    """
    return Parity(S)


def sparse_majority(S) -> Majority:
    """m-SPARSE MAJORITY (a tie rejected when ``m`` is even).

    Parameters
    ----------
    S : collection of int
        The 1-based positions it reads (``m = len(S)``).
    """
    return Majority(S)


# ---- targets by name ----------------------------------------------------------------------
def target(name: str, N: int) -> BooleanFunction:
    """The Boolean function a name stands for, at length N.

    ``PARITY``, ``FIRST``, ``MAJORITY`` (odd N: at even N a tie would be rejected, so the book
    trains MAJORITY at odd N only), ``SPARSE_PARITY_m`` and ``SPARSE_MAJORITY_m`` (m = 2..N) on
    the first m positions {1, ..., m} (a CHOICE: any fixed m positions would do; the first ones
    are where the positional feature 1[n=1] and n/(N+1) give the model a handle), and
    ``SPREAD_PARITY_m``: m-sparse PARITY on the spread positions {ceil(k N / m): k = 1..m}
    (m = 2..N; for m = 3 {ceil(N/3), ceil(2N/3), N}), a generic support that holds the
    marked x_1 only when N = m.
    """
    N = check_n(N)
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, got {name!r}")
    if name == "PARITY":
        return PARITY
    if name == "FIRST":
        return FIRST
    if name == "MAJORITY":
        if N % 2 == 0:
            raise ValueError(f"name='MAJORITY' needs odd N (no ties), got N={N}")
        return MAJORITY
    if name.startswith("SPREAD_PARITY_"):
        try:
            m = len(target(name.replace("SPREAD", "SPARSE"), N).S)   # m checked there
        except ValueError as e:
            raise ValueError(str(e).replace("SPARSE", "SPREAD")) from None
        return sparse_parity(sorted({-(-k * N // m) for k in range(1, m + 1)}))
    for kind, cls in (("SPARSE_PARITY_", "parity"), ("SPARSE_MAJORITY_", "majority")):
        if name.startswith(kind):
            try:
                m = int(name[len(kind):])
            except ValueError:
                raise ValueError(f"name={name!r}: expected {kind}m with an integer m") from None
            if not 2 <= m <= N:
                raise ValueError(f"name={name!r}: m must be in 2..N={N}, got m={m}")
            return (sparse_parity if cls == "parity" else sparse_majority)(range(1, m + 1))
    raise ValueError(f"name={name!r} is not a target; allowed: PARITY, FIRST, MAJORITY, "
                     f"SPARSE_PARITY_m, SPARSE_MAJORITY_m, SPREAD_PARITY_m")
