"""Statistics for comparing benchmark runs: pure functions, tested against known values."""
import math


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no values")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def percentile(xs, q):
    """The q-quantile, 0 <= q <= 1, interpolated between order statistics (numpy's default, and
    the harness's stats::percentile, so both sides of a comparison mean the same figure)."""
    s = sorted(xs)
    if not s:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 1:
        raise ValueError(f"percentile: q = {q} is outside [0, 1]")
    rank = q * (len(s) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


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


def _continued_fraction(a, b, x):
    """The continued fraction of the regularised incomplete beta function (Lentz's method)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def incomplete_beta(x, a, b):
    """The regularised incomplete beta function I_x(a, b), for 0 <= x <= 1."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with `df` (possibly fractional) degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / (df + t * t), df / 2, 0.5)
    return 1 - tail if t > 0 else tail


def t_quantile(p, df):
    """The t with P(T <= t) = p, 0.5 <= p < 1, by bisection on t_cdf."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def ratio_interval(base, current, confidence=0.95):
    """Confidence interval of current / base, the ratio of the geometric means of two samples of
    positive values (a repetition's mean step time each): Welch's t-interval on the logarithms.

    Repetitions are the independent units: steps within one repetition share its warm-up, its
    allocator state and its stretch of machine drift, so they are not independent samples.
    Returns (low, high), or None when a side has fewer than two values (no spread to judge by)."""
    n1, n2 = len(base), len(current)
    if n1 < 2 or n2 < 2:
        return None
    lb, lc = [math.log(x) for x in base], [math.log(x) for x in current]
    m1, m2 = sum(lb) / n1, sum(lc) / n2
    v1 = sum((x - m1) ** 2 for x in lb) / (n1 - 1) / n1
    v2 = sum((x - m2) ** 2 for x in lc) / (n2 - 1) / n2
    diff, se = m2 - m1, math.sqrt(v1 + v2)
    if se == 0:
        return math.exp(diff), math.exp(diff)
    df = (v1 + v2) ** 2 / (v1 ** 2 / (n1 - 1) + v2 ** 2 / (n2 - 1))  # Welch-Satterthwaite
    half = t_quantile(0.5 + confidence / 2, df) * se
    return math.exp(diff - half), math.exp(diff + half)


def paired_ratio_interval(base, current, confidence=0.95):
    """Confidence interval of current / base from pairs: base[i] and current[i] were measured side by
    side (one round of an interleaved A/B run), so the machine's drift, which moves both alike,
    cancels in their ratio. The t-interval of the mean log ratio over the pairs. Returns
    (low, high), or None with fewer than two pairs or sides of unequal length."""
    n = len(base)
    if n < 2 or len(current) != n:
        return None
    logs = [math.log(c / b) for b, c in zip(base, current)]
    m = sum(logs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    if sd == 0:
        return math.exp(m), math.exp(m)
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return math.exp(m - half), math.exp(m + half)
