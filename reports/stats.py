"""Statistics for comparing benchmark runs: pure functions, tested against known values."""
import math
from functools import lru_cache


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no values")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def cv(xs):
    """Coefficient of variation (sample stddev / mean); 0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return math.sqrt(var) / m if m else 0.0


def geometric_mean(xs):
    xs = list(xs)
    if not xs:
        raise ValueError("geometric mean of no values")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _ranks(values):
    """Average ranks (1-based), ties sharing the mean of their positions."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@lru_cache(maxsize=None)
def _u_counts(n1, n2):
    """Number of arrangements giving each U (no ties): counts[u] for u in 0..n1*n2."""
    # f(n1, n2, u) = f(n1 - 1, n2, u - n2) + f(n1, n2 - 1, u): the largest value is in sample 1 or 2.
    if n1 == 0 or n2 == 0:
        return (1,)
    a = _u_counts(n1 - 1, n2)
    b = _u_counts(n1, n2 - 1)
    out = [0] * (n1 * n2 + 1)
    for u, c in enumerate(b):
        out[u] += c
    for u, c in enumerate(a):
        out[u + n2] += c
    return tuple(out)


def mann_whitney_u(a, b):
    """Two-sided Mann-Whitney U test. Returns (U of sample a, p-value).

    Exact distribution for small samples without ties (n1 * n2 <= 400, as repetitions are);
    otherwise the normal approximation with tie correction and continuity correction.
    """
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs two non-empty samples")
    values = list(a) + list(b)
    ranks = _ranks(values)
    r1 = sum(ranks[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2
    ties = len(set(values)) != len(values)
    if not ties and n1 * n2 <= 400:
        counts = _u_counts(n1, n2)
        total = sum(counts)
        u_small = min(u1, n1 * n2 - u1)
        tail = sum(counts[: int(u_small) + 1]) / total
        return u1, min(1.0, 2 * tail)
    mean_u = n1 * n2 / 2
    n = n1 + n2
    tie_term = 0.0
    for v in set(values):
        t = values.count(v)
        tie_term += t ** 3 - t
    var_u = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if var_u <= 0:
        return u1, 1.0
    z = (abs(u1 - mean_u) - 0.5) / math.sqrt(var_u)
    p = math.erfc(max(z, 0.0) / math.sqrt(2))
    return u1, min(1.0, p)
