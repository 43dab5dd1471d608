"""What each one-card pod size is worth, in cards, in the best packing of the typical mix.

The typical one-card pods (shares and whole cards, in their proportions) packed into cards with
full knowledge need a least number of cards per pod: the cutting-stock LP `min sum x_p` over card
patterns `p` (multisets of sizes that fit one card) with `sum_p count_s(p) x_p >= weight_s`. Its
dual prices `price[s]` (cards per pod of size `s`, e.g. 1 for an 810, 1/2 for a 470 that pairs
with another, 1/3 for a 320 that fills a card beside a 650 or two more 320s) say what the room
left on a card is worth: `value[left]`, the most a card of `left` milli holds at those prices (a
knapsack), is what the room can still earn, and `left - FREE * value[left]` the milli it wastes
in the best packing. card_waste.py turns that into a score.

Solved by column generation (revised simplex on a basis of one column per size, new patterns
priced by the knapsack): a few sizes (11 on openb), a few iterations, pure Python, once per mix.
"""

from __future__ import annotations

from ledger.state import FREE

EPS = 1e-9
TIE_BREAK = 1e-4  # relative extra demand of the smallest sizes (see share_prices)
MAX_ITERATIONS = 200  # far above what a mix of a few dozen sizes needs; a bound, not a tuning
# The LP's CPU grows about with the cube of its sizes (4 ms for 11, 29 ms for 20, 0.76 s for 50):
# a mix with more sizes is priced over its most wanted ones, the rest by what they displace.
MAX_SIZES = 20


def share_prices(weights: list[tuple[int, float]]) -> dict[int, float]:
    """Dual prices (cards per pod) of the mix `weights`, (milli, weight) pairs with 0 < milli <=
    FREE and weight > 0, sorted by milli. Always feasible: no card pattern is worth more than 1."""
    if len(weights) > MAX_SIZES:
        return _priced_by_what_they_displace(weights)
    sizes = [milli for milli, _ in weights]
    # Smaller sizes a little more in demand than measured: where weights coincide (as many 320s
    # as 650s to pair them with) the prices are not unique, and the extra small pods, packed among
    # themselves (three 320s a card), give each its own price rather than none.
    demand = [weight * (1 + TIE_BREAK * (FREE - milli) / FREE) for milli, weight in weights]
    if not sizes:
        return {}
    basis = [[float(FREE // s) if j == i else 0.0 for j in range(len(sizes))] for i, s in enumerate(sizes)]
    prices = [0.0] * len(sizes)
    for _ in range(MAX_ITERATIONS):
        prices = _solve_transposed(basis, [1.0] * len(sizes))
        value, pattern = _best_pattern(sizes, prices)
        if value <= 1 + EPS:
            break
        leaving = _ratio_test(_solve(basis, demand), _solve(basis, pattern))
        if leaving is None:
            break
        basis[leaving] = pattern
    prices = [max(0.0, p) for p in prices]
    worth = _best_pattern(sizes, prices)[0]
    scale = 1 / worth if worth > 1 else 1.0  # stopped early: scaled, no pattern is worth over a card
    return {s: p * scale for s, p in zip(sizes, prices)}


def _priced_by_what_they_displace(weights: list[tuple[int, float]]) -> dict[int, float]:
    """The LP over the MAX_SIZES most wanted sizes; each rarer size priced at `value[milli]`, the
    most the room it takes would hold of those. Still feasible: room values add up to no more than
    the value of the room they share, so no card pattern is worth more than 1."""
    common = sorted(sorted(weights, key=lambda w: (-w[1], w[0]))[:MAX_SIZES])
    prices = share_prices(common)
    value = room_values(prices)
    return {milli: prices.get(milli, value[milli]) for milli, _ in weights}


def room_values(prices: dict[int, float]) -> list[float]:
    """`value[left]` for left = 0..FREE: the most a card with `left` milli holds at `prices`
    (unbounded knapsack, sizes used any number of times)."""
    items = sorted(prices.items())
    value = [0.0] * (FREE + 1)
    for left in range(1, FREE + 1):
        best = value[left - 1]
        for milli, price in items:
            if milli > left:
                break
            if price + value[left - milli] > best:
                best = price + value[left - milli]
        value[left] = best
    return value


def _best_pattern(sizes: list[int], prices: list[float]) -> tuple[float, list[float]]:
    """The card pattern worth most at `prices` (its worth, and its count of each size)."""
    value, choice = [0.0] * (FREE + 1), [-1] * (FREE + 1)
    for left in range(1, FREE + 1):
        value[left] = value[left - 1]
        for i, milli in enumerate(sizes):
            if milli <= left and prices[i] + value[left - milli] > value[left] + EPS:
                value[left], choice[left] = prices[i] + value[left - milli], i
    pattern, left = [0.0] * len(sizes), FREE
    while left > 0:
        if choice[left] < 0:
            left -= 1
        else:
            pattern[choice[left]] += 1
            left -= sizes[choice[left]]
    return value[FREE], pattern


def _ratio_test(x: list[float], direction: list[float]) -> int | None:
    """The basis column that leaves when the new pattern enters (lowest index among ties)."""
    best, leaving = None, None
    for i, (xi, di) in enumerate(zip(x, direction)):
        if di > EPS:
            ratio = max(xi, 0.0) / di
            if best is None or ratio < best - EPS:
                best, leaving = ratio, i
    return leaving


def _solve(columns: list[list[float]], rhs: list[float]) -> list[float]:
    """x with sum_i x_i columns[i] = rhs."""
    n = len(columns)
    return _gauss([[columns[j][i] for j in range(n)] for i in range(n)], rhs)


def _solve_transposed(columns: list[list[float]], rhs: list[float]) -> list[float]:
    """y with y . columns[i] = rhs[i] for every i."""
    return _gauss([list(col) for col in columns], rhs)


def _gauss(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Solve matrix @ x = rhs by Gaussian elimination with partial pivoting (a basis is never
    singular: each entering pattern replaces a column along which it has a positive component)."""
    n = len(matrix)
    rows = [row[:] + [b] for row, b in zip(matrix, rhs)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        head = rows[col][col]
        for r in range(col + 1, n):
            factor = rows[r][col] / head
            if factor:
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col])]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (rows[r][n] - sum(rows[r][c] * x[c] for c in range(r + 1, n))) / rows[r][r]
    return x
