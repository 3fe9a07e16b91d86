"""tiny's Tensor, op by op, as a specification.

Every expected value is computed here from nested Python lists (never by tiny, never by numpy), on random inputs with
odd, non-square shapes, so that tails, masks, strides and broadcasts all get exercised. Inputs are rounded to float32
first, so a reference sees exactly the numbers the kernel sees.
"""
import array, collections, concurrent.futures, contextlib, ctypes, ctypes.util, dataclasses, gc, hashlib, itertools, \
  math, operator, os, types
import functools, json, random, re, shutil, struct, subprocess, sys, textwrap, threading, time
from ctypes import POINTER, c_bool, c_char_p, c_double, c_long, c_ulong, c_void_p
from pathlib import Path
from typing import NamedTuple
import pytest
import cuda_rt, metal_rt, tiny
from tiny import Tensor, dtypes

HERE = Path(__file__).resolve().parent

# ------------------------------------------------------------------------------------------------------------------
# helpers and the pure-Python reference

def f32(x: float) -> float: return struct.unpack("f", struct.pack("f", x))[0]
def f16(x: float) -> float: return struct.unpack("e", struct.pack("e", x))[0]

def bf16(x: float) -> float:
  """x rounded to bfloat16 the long way: to float32, then to 8 significant bits (a float32 subnormal's step below
  2**-126), to the nearest, ties to even (Python's round), infinite past bfloat16's largest."""
  f = struct.unpack("f", struct.pack("f", x))[0]
  if not math.isfinite(f) or f == 0: return f
  step = 2.0 ** (max(math.frexp(f)[1], -125) - 8)
  r = round(f / step) * step
  return r if abs(r) < 2.0 ** 128 else math.copysign(math.inf, r)

def shape_of(x) -> tuple: return (len(x),) + shape_of(x[0]) if isinstance(x, list) else ()
def flat(x) -> list: return [v for e in x for v in flat(e)] if isinstance(x, list) else [x]

def at(x, idx):
  for i in idx: x = x[i]
  return x

def build(shape, fn, idx=()):
  """The nested list of `shape` whose element at idx is fn(idx); a scalar for shape ()."""
  if len(idx) == len(shape): return fn(idx)
  return [build(shape, fn, idx + (i,)) for i in range(shape[len(idx)])]

def rand_list(shape, seed, lo=-2.0, hi=2.0):
  rng = random.Random(seed)
  return build(shape, lambda _: f32(rng.uniform(lo, hi)))

def rand_ints(shape, seed, lo=-9, hi=9):
  rng = random.Random(seed)
  return build(shape, lambda _: rng.randint(lo, hi))

def broadcast_shape(*shapes) -> tuple:
  n = max(len(s) for s in shapes)
  out = []
  for dims in zip(*[(1,) * (n - len(s)) + tuple(s) for s in shapes]):
    sizes = set(dims) - {1}
    assert len(sizes) <= 1, f"reference cannot broadcast {shapes}"
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)

def source_index(idx, shape) -> tuple:
  """The element of an array of `shape` that broadcasts to position idx of a bigger array."""
  return tuple(0 if s == 1 else i for i, s in zip(idx[len(idx) - len(shape):], shape))

def ref_ew(fn, *xs):
  """fn elementwise over nested lists or scalars, broadcast as numpy does."""
  shapes = [shape_of(x) for x in xs]
  return build(broadcast_shape(*shapes), lambda idx: fn(*[at(x, source_index(idx, s)) for x, s in zip(xs, shapes)]))

def ref_reduce(fn, x, axis=None, keepdim=False):
  shape = shape_of(x)
  axes = range(len(shape)) if axis is None else [axis] if isinstance(axis, int) else axis
  axes = {a % len(shape) for a in axes}
  kept = [d for d in range(len(shape)) if d not in axes]
  def cell(idx):  # idx holds one position per kept axis
    pos = dict(zip(kept, idx))
    ranges = [range(s) if d in axes else (pos[d],) for d, s in enumerate(shape)]
    return fn([at(x, j) for j in itertools.product(*ranges)])
  if not keepdim: return build(tuple(shape[d] for d in kept), cell)
  return build(tuple(1 if d in axes else s for d, s in enumerate(shape)), lambda idx: cell([idx[d] for d in kept]))

def mean(v): return math.fsum(v) / len(v)

def ref_reshape(x, shape):
  values = flat(x)
  return build(shape, lambda idx: values[sum(i * math.prod(shape[d + 1:]) for d, i in enumerate(idx))])

def ref_permute(x, order):
  shape = shape_of(x)
  def cell(idx):
    src = [0] * len(order)
    for k, d in enumerate(order): src[d] = idx[k]
    return at(x, src)
  return build(tuple(shape[d] for d in order), cell)

def ref_pad(x, pads, value=0.0):
  shape = shape_of(x)
  def cell(idx):
    src = tuple(i - b for i, (b, _) in zip(idx, pads))
    return at(x, src) if all(0 <= j < s for j, s in zip(src, shape)) else value
  return build(tuple(b + s + a for s, (b, a) in zip(shape, pads)), cell)

def ref_getitem(x, key):
  """Python's own list indexing, one axis at a time, with numpy's None and ... ."""
  key = key if isinstance(key, tuple) else (key,)
  if any(k is Ellipsis for k in key):
    i = next(i for i, k in enumerate(key) if k is Ellipsis)
    real = sum(k is not None and k is not Ellipsis for k in key)
    key = key[:i] + (slice(None),) * (len(shape_of(x)) - real) + key[i + 1:]
  def go(x, key):
    if not key: return x
    k, rest = key[0], key[1:]
    if k is None: return [go(x, rest)]
    if isinstance(k, int): return go(x[k], rest)
    return [go(e, rest) for e in x[k]]
  return go(x, key)

def ref_cat(xs, dim): return sum(xs, []) if dim == 0 else [ref_cat(list(parts), dim - 1) for parts in zip(*xs)]
def ref_unsqueeze(x, dim): return [x] if dim == 0 else [ref_unsqueeze(e, dim - 1) for e in x]

def matmul2d(a, b):
  return [[math.fsum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]

def ref_matmul(a, b):
  sa, sb = shape_of(a), shape_of(b)
  if len(sa) == 1 and len(sb) == 1: return math.fsum(x * y for x, y in zip(a, b))
  if len(sa) == 1: return ref_reshape(ref_matmul([a], b), sb[:-2] + sb[-1:])  # (k,) acts as (1,k), then drops the 1
  if len(sb) == 1: return ref_reshape(ref_matmul(a, [[v] for v in b]), sa[:-1])  # (k,) acts as (k,1), then drops the 1
  def one(idx): return matmul2d(at(a, source_index(idx, sa[:-2])), at(b, source_index(idx, sb[:-2])))
  return build(broadcast_shape(sa[:-2], sb[:-2]), one)  # batch dims broadcast

def ref_softmax(x, axis, log=False):
  top = ref_reduce(max, x, axis, keepdim=True)
  total = ref_reduce(math.fsum, ref_ew(lambda v, m: math.exp(v - m), x, top), axis, keepdim=True)
  if log: return ref_ew(lambda v, m, s: v - m - math.log(s), x, top, total)
  return ref_ew(lambda v, m, s: math.exp(v - m) / s, x, top, total)

def assert_close(got, want, rtol=1e-5, atol=1e-6):
  assert shape_of(got) == shape_of(want), f"shape {shape_of(got)} != {shape_of(want)}"
  for i, (g, w) in enumerate(zip(flat(got), flat(want))):
    assert math.isclose(g, w, rel_tol=rtol, abs_tol=atol), f"element {i} (flat): got {g}, want {w}"

def realized(*shapes, seed=0): return [Tensor(rand_list(s, seed + i)).realize() for i, s in enumerate(shapes)]

LOWERED: dict = {}  # (kernel AST, NOOPT) -> None: every kernel the test run lowers, for the dialect checks at the end

@pytest.fixture(scope="session", autouse=True)
def every_kernel_in_every_dialect():
  """Records every kernel the run lowers; when the run ends, checks each in the GPU dialects (see the end of this
  file). At the end of the session, not in a test: under pytest-xdist each worker checks the kernels its tests made."""
  lower = tiny.to_program
  def recording(ast, device):
    LOWERED[(ast, tiny.getenv("NOOPT"))] = None  # ASTs hold PARAMs, not buffers: keeping them keeps no memory alive
    return lower(ast, device)
  tiny.to_program = recording
  yield
  with pytest.MonkeyPatch.context() as monkeypatch:
    if have_nvrtc():
      cuda = list(rendered(monkeypatch, "CUDA"))
      for arch in ("sm_80", "sm_90"): compile_with_nvrtc(cuda, arch)
    render_for_metal(rendered(monkeypatch, "METAL"))
  tiny.to_program = lower

def run_python(code: str, tmp_path: Path, cwd: Path = HERE, **env) -> subprocess.CompletedProcess:
  """Runs `code` in a fresh interpreter with its own kernel cache; stdout and stderr come back interleaved."""
  full_env = {**os.environ, "DEBUG": "0", "TINY_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(HERE), **env}
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=full_env, timeout=300,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

# ------------------------------------------------------------------------------------------------------------------
# creation

def test_tensor_from_nested_list_keeps_shape_and_values():
  x = rand_list((3, 7), 1)
  t = Tensor(x)
  assert isinstance(t.shape, tuple) and t.shape == (3, 7)
  assert (t.ndim, t.numel(), len(t)) == (2, 21, 3)
  assert t.tolist() == x

@pytest.mark.parametrize("value, dtype", [(1.5, dtypes.float32), (7, dtypes.int32), (True, dtypes.bool)])
def test_python_type_chooses_dtype(value, dtype):
  assert Tensor([value, value, value]).dtype == dtype
  scalar = Tensor(value)
  assert scalar.shape == () and scalar.dtype == dtype and scalar.item() == value

def test_default_float_and_int_are_what_python_numbers_become(monkeypatch):
  assert (dtypes.default_float, dtypes.default_int) == (dtypes.float32, dtypes.int32)
  # (made before the defaults change: a composite's template of them must not be kept)
  assert Tensor.arange(0.5, 3).dtype == (Tensor([1, 2]) * 1.5).dtype == dtypes.float32
  monkeypatch.setattr(dtypes, "default_float", dtypes.float16)
  monkeypatch.setattr(dtypes, "default_int", dtypes.int64)
  made = [Tensor([1.5]), Tensor(2.0), Tensor.zeros(2), Tensor.rand(3), Tensor.randn(3), Tensor.arange(0.5, 3),
          Tensor.linspace(0, 1, 5), Tensor.eye(2), Tensor.empty(2), Tensor([1, 2]) / 2, Tensor([1, 2]).sqrt()]
  assert [t.dtype for t in made] == [dtypes.float16] * len(made)
  assert [t.dtype for t in (Tensor([1, 2]), Tensor(3), Tensor.arange(4))] == [dtypes.int64] * 3
  assert Tensor([2**40]).dtype == dtypes.int64 and Tensor([1.5]).float().dtype == dtypes.float32
  assert (Tensor([1.0, 2.0], dtype=dtypes.float32) * 1.5).dtype == dtypes.float32  # a tensor's dtype holds
  assert (Tensor([1, 2]) * 1.5).dtype == dtypes.float16

def test_dtype_aliases():
  assert dtypes.float == dtypes.float32 and dtypes.int == dtypes.int32

def test_explicit_dtype_converts_python_values():
  t = Tensor([1, -2, 3], dtype=dtypes.float32)
  assert t.dtype == dtypes.float32 and t.tolist() == [1.0, -2.0, 3.0]

def test_empty_has_shape_and_dtype_only():
  assert Tensor.empty(3, 7).shape == (3, 7) and Tensor.empty((5, 1, 3)).dtype == dtypes.float32
  assert shape_of(Tensor.empty(7, 33).tolist()) == (7, 33)

CONSTANT_MAKERS = {"zeros": (lambda s: Tensor.zeros(*s), 0.0), "ones": (lambda s: Tensor.ones(s), 1.0),
                   "full": (lambda s: Tensor.full(s, -2.5), -2.5)}

@pytest.mark.parametrize("maker", CONSTANT_MAKERS)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (1003,), (5, 1, 3)])
def test_constant_tensors_fill_every_element(maker, shape):
  make, value = CONSTANT_MAKERS[maker]
  t = make(shape)
  assert t.shape == shape and t.dtype == dtypes.float32 and t.tolist() == build(shape, lambda _: value)

def test_constant_tensor_with_int_dtype():
  t = Tensor.zeros(3, 7, dtype=dtypes.int32)
  assert t.dtype == dtypes.int32 and t.tolist() == build((3, 7), lambda _: 0)

@pytest.mark.parametrize("args", [(7,), (2, 33, 3), (10, -1, -3), (1003,)])
def test_arange_matches_range(args):
  t = Tensor.arange(*args)
  assert t.dtype == dtypes.int32 and t.tolist() == list(range(*args))

def test_arange_with_float_step():
  t = Tensor.arange(0, 1.75, 0.25)
  assert t.dtype == dtypes.float32 and t.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]

@pytest.mark.parametrize("n", [1, 3, 7])
def test_eye_is_identity(n):
  assert Tensor.eye(n).tolist() == build((n, n), lambda i: 1.0 if i[0] == i[1] else 0.0)

def test_eye_of_other_sizes_and_bad_ones():
  assert Tensor.eye(2, 5).tolist() == build((2, 5), lambda i: 1.0 if i[0] == i[1] else 0.0)
  assert Tensor.eye(3, 0).shape == (3, 0) and Tensor.eye(0).shape == (0, 0)
  for n, m in ((-3, 3), (3, -3), (-3, -3)):
    with pytest.raises(ValueError, match="-3"): Tensor.eye(n, m)  # (tinygrad's error type)

def test_like_constructors_copy_shape_and_dtype():
  t = Tensor(rand_ints((3, 7), 2))
  for made, value in [(t.zeros_like(), 0), (t.ones_like(), 1), (Tensor.full_like(t, 4), 4)]:
    assert made.shape == (3, 7) and made.dtype == dtypes.int32 and made.tolist() == build((3, 7), lambda _: value)

def test_random_shapes_as_varargs_or_tuple():
  for make in (Tensor.rand, Tensor.randn):
    assert make(3, 7).shape == make((3, 7)).shape == (3, 7) and make(5, 1, 3).dtype == dtypes.float32

def test_rand_is_uniform_in_unit_interval():
  Tensor.manual_seed(0)
  v = Tensor.rand(10007).tolist()
  assert all(0.0 <= x < 1.0 for x in v)
  assert abs(mean(v) - 0.5) < 0.02 and len(set(v)) > 9000

def test_randn_is_standard_normal():
  Tensor.manual_seed(0)
  v = Tensor.randn(10007).tolist()
  m = mean(v)
  assert abs(m) < 0.05 and abs(math.sqrt(mean([(x - m) ** 2 for x in v])) - 1) < 0.05

def test_manual_seed_repeats_the_stream():
  Tensor.manual_seed(1234)
  first = Tensor.rand(3, 7).tolist()
  Tensor.manual_seed(1234)
  assert Tensor.rand(3, 7).tolist() == first

def test_consecutive_rand_calls_differ():
  Tensor.manual_seed(5)
  a, b = Tensor.rand(33), Tensor.rand(33)
  assert a.tolist() != b.tolist()

def test_rand_values_do_not_depend_on_realize_order():
  Tensor.manual_seed(7)
  a, b = Tensor.rand(1003), Tensor.rand(7, 33)
  in_order = (a.tolist(), b.tolist())
  Tensor.manual_seed(7)
  a, b = Tensor.rand(1003), Tensor.rand(7, 33)
  b_first = b.tolist()
  assert (a.tolist(), b_first) == in_order

# ------------------------------------------------------------------------------------------------------------------
# elementwise

UNARY = {  # name: (tiny, reference, input range)
  "neg": (lambda t: -t, lambda x: -x, (-3, 3)),
  "exp": (Tensor.exp, math.exp, (-3, 3)),
  "log": (Tensor.log, math.log, (0.1, 5)),
  "sqrt": (Tensor.sqrt, math.sqrt, (0, 5)),
  "sin": (Tensor.sin, math.sin, (-6, 6)),
  "relu": (Tensor.relu, lambda x: max(x, 0.0), (-3, 3)),
  "sigmoid": (Tensor.sigmoid, lambda x: 1 / (1 + math.exp(-x)), (-6, 6)),
  "tanh": (Tensor.tanh, math.tanh, (-4, 4)),
  "abs": (Tensor.abs, abs, (-3, 3)),
}

@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("shape", [(1003,), (5, 1, 3)])
def test_unary_op_matches_reference(name, shape):
  op, ref, (lo, hi) = UNARY[name]
  x = rand_list(shape, 3, lo, hi)
  got = op(Tensor(x))
  assert got.dtype == dtypes.float32
  assert_close(got.tolist(), ref_ew(ref, x), rtol=1e-4, atol=1e-5)

def _ulps(a:float, b:float) -> float:  # how many float32s lie between a and b; nan only matches nan
  if math.isnan(a) or math.isnan(b): return 0 if math.isnan(a) and math.isnan(b) else math.inf
  def order(x):  # float32s in order as ints: a negative's bits count down from -0
    bits = struct.unpack("I", struct.pack("f", x))[0]
    return bits if bits < 2**31 else 2**31 - bits
  return abs(order(a) - order(b))

@pytest.mark.parametrize("op", ["exp2", "log2", "sin", "exp"])
def test_transcendentals_within_2_ulp_of_the_c_library(op):
  """On the CPU, float32 exp2, log2, sin and exp are arithmetic that tiny writes (so they vectorize), not libm calls:
  over the whole float range, bit patterns at random, a dense sweep of exp2's domain, subnormals, [0.5, 2), the floats
  nearest multiples of pi/2 (where sin's reduction cancels most) and the edges."""
  libm = ctypes.CDLL(ctypes.util.find_library("m"))
  ref = getattr(libm, op + "f")
  ref.restype, ref.argtypes = ctypes.c_float, [ctypes.c_float]
  rng = random.Random(7)
  def f32(bits): return struct.unpack("f", struct.pack("I", bits))[0]
  xs = [f32(rng.getrandbits(32)) for _ in range(100_000)] + [-160 + 300 * i / 100_003 for i in range(100_003)]
  xs += [f32(b) for b in range(1, 2**23, 211)] + [f32(0x3F000000 + b) for b in range(0, 2**24, 157)]
  near_quadrants = [struct.unpack("I", struct.pack("f", n * math.pi / 2))[0] for n in range(1, 10**6, 37)]
  xs += [f32(b + d) for b in near_quadrants for d in (-1, 0, 1)]
  xs += [0.0, -0.0, math.inf, -math.inf, math.nan, 3.4028234663852886e+38, 1.401298464324817e-45, -1e-45, 128.0,
         -149.0, -150.0, 127.99999, 4476.76953125, -6.62760456036263e+30]
  got = getattr(Tensor(xs, device="CPU"), op)().tolist()
  worst = max(zip(xs, got), key=lambda xg: _ulps(xg[1], ref(xg[0])))
  assert _ulps(worst[1], ref(worst[0])) <= 2, f"{op}({worst[0]!r}) = {worst[1]!r}, the C library says {ref(worst[0])!r}"
  assert f"{op}f(" not in tiny.render(getattr(Tensor.empty(1003), op)(), device="CPU")[0].src  # no libm call
  gpu_op = {"exp": "exp2"}.get(op, op)  # (e**x is 2**(x log2(e)) there)
  assert f"{gpu_op}(" in tiny.render(getattr(Tensor.empty(1003), op)(), device="CUDA")[0].src  # GPUs keep theirs

@pytest.mark.parametrize("op", ["tanh", "sinh", "asinh", "atanh", "acosh", "erf"])
def test_small_arguments_keep_their_precision(op):
  """Near 0 (acosh: near 1) e^x - 1 and log(1 + x) written out cancel: these are built without that cancellation, each
  within 4 float32 ulp of its float64 value from 1e-30 up (erf up to 1/2: past it, its approximation's error is
  3e-8). Odd functions keep -0.0's sign."""
  rng = random.Random(11)
  xs = [f32(sign * 10 ** rng.uniform(-30, 0.7)) for sign in (1, -1) for _ in range(2000)]
  xs = {"atanh": [x for x in xs if abs(x) < 1], "acosh": [f32(1 + abs(x)) for x in xs],
        "erf": [x for x in xs if abs(x) < 0.5]}.get(op, xs)
  got = getattr(Tensor(xs), op)().tolist()
  ref = getattr(math, op)
  worst = max(zip(xs, got), key=lambda xg: _ulps(xg[1], f32(ref(xg[0]))))
  assert _ulps(worst[1], f32(ref(worst[0]))) <= 4, f"{op}({worst[0]!r}) = {worst[1]!r}, not {ref(worst[0])!r}"
  if op != "acosh": assert [math.copysign(1, v) for v in getattr(Tensor([0.0, -0.0]), op)().tolist()] == [1, -1]

def test_erf_and_exact_gelu_keep_their_tails():
  """erf within 2e-7 everywhere; gelu(x) = x P(X <= x) within 1e-5 of it relatively down to -12, where 1 + erf(x/√2)
  written out cancels to 0 (from -7.4 on, in float32)."""
  xs = [i / 40 - 7 for i in range(561)]
  assert max(abs(g - math.erf(x)) for x, g in zip(xs, Tensor(xs).erf().tolist())) < 2e-7
  xs = [-12.0, -9.5, -8.0, -6.25, -4.0, -2.5, -1.0, -0.25, 0.0, 0.5, 3.0]
  want = [0.5 * x * math.erfc(-x / math.sqrt(2)) for x in xs]
  assert_close(Tensor(xs).gelu(approximate="none").tolist(), want, rtol=1e-5, atol=0)

BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}

@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (1003,)])
def test_binary_op_matches_reference(op, shape):
  a = rand_list(shape, 4)
  b = ref_ew(lambda v: v if abs(v) > 0.5 else f32(v + 1.5), rand_list(shape, 5))  # keeps divisors away from 0
  assert_close(BINARY[op](Tensor(a), Tensor(b)).tolist(), ref_ew(BINARY[op], a, b))

SCALAR_OPS = [("t+1.5", lambda t: t + 1.5), ("1.5+t", lambda t: 1.5 + t), ("t-2", lambda t: t - 2),
              ("2-t", lambda t: 2 - t), ("t*3", lambda t: t * 3), ("3*t", lambda t: 3 * t), ("t/4", lambda t: t / 4),
              ("1/t", lambda t: 1 / t)]

@pytest.mark.parametrize("name, op", SCALAR_OPS, ids=[n for n, _ in SCALAR_OPS])
def test_python_scalar_on_either_side(name, op):
  x = rand_list((7, 33), 6, 0.5, 2.0)
  got = op(Tensor(x))
  assert got.dtype == dtypes.float32
  assert_close(got.tolist(), ref_ew(op, x))

def test_maximum_and_minimum_broadcast():
  a, b = rand_list((3, 7), 7), rand_list((7,), 8)
  assert_close(Tensor(a).maximum(Tensor(b)).tolist(), ref_ew(max, a, b))
  assert_close(Tensor(a).minimum(Tensor(b)).tolist(), ref_ew(min, a, b))

def test_maximum_and_minimum_with_scalar():
  x = rand_list((1003,), 9)
  assert_close(Tensor(x).maximum(0.5).tolist(), ref_ew(lambda v: max(v, 0.5), x))
  assert_close(Tensor(x).minimum(-0.5).tolist(), ref_ew(lambda v: min(v, -0.5), x))

def test_where_selects_with_broadcasting():
  c, a, b = rand_list((3, 7), 10), rand_list((3, 1), 11), rand_list((7,), 12)
  got = (Tensor(c) > 0).where(Tensor(a), Tensor(b))
  assert_close(got.tolist(), ref_ew(lambda k, x, y: x if k > 0 else y, c, a, b))

def test_where_with_scalar_branches():
  x = rand_list((7, 33), 13)
  assert_close((Tensor(x) > 0).where(Tensor(x), 0.0).tolist(), ref_ew(lambda v: v if v > 0 else 0.0, x))
  assert (Tensor(x) < 0).where(-1.0, 1.0).tolist() == ref_ew(lambda v: -1.0 if v < 0 else 1.0, x)

COMPARISONS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
               ">=": operator.ge}

@pytest.mark.parametrize("op", COMPARISONS)
def test_comparison_returns_bool_tensor(op):
  a, b = rand_ints((7, 33), 14, -2, 2), rand_ints((33,), 15, -2, 2)  # small ints, so that ties are common
  a, b = ref_ew(float, a), ref_ew(float, b)
  got = COMPARISONS[op](Tensor(a), Tensor(b))
  assert got.dtype == dtypes.bool
  values = got.tolist()
  assert values == ref_ew(COMPARISONS[op], a, b) and all(isinstance(v, bool) for v in flat(values))

def test_comparison_with_scalar_on_either_side():
  x = rand_list((1003,), 16)
  assert (Tensor(x) < 0.5).tolist() == ref_ew(lambda v: v < 0.5, x)
  assert (0.5 < Tensor(x)).tolist() == ref_ew(lambda v: 0.5 < v, x)
  assert (Tensor(rand_ints((3, 7), 17)) == 2).tolist() == ref_ew(lambda v: v == 2, rand_ints((3, 7), 17))

def test_cast_float_to_int_truncates_toward_zero():
  x = rand_list((7, 33), 18, -9, 9)
  assert Tensor(x).int().dtype == dtypes.int32
  assert Tensor(x).int().tolist() == ref_ew(int, x) == Tensor(x).cast(dtypes.int32).tolist()

def test_cast_to_bool_means_nonzero():
  x = ref_ew(lambda v: float(v), rand_ints((3, 7), 19, -1, 1))
  assert Tensor(x).bool().dtype == dtypes.bool
  assert Tensor(x).bool().tolist() == ref_ew(bool, x)

def test_cast_int_and_bool_to_float():
  x = rand_ints((3, 7), 20)
  assert Tensor(x).float().dtype == dtypes.float32 and Tensor(x).float().tolist() == ref_ew(float, x)
  assert Tensor([True, False, True]).float().tolist() == [1.0, 0.0, 1.0]

def test_int_arithmetic_stays_int():
  a, b = rand_ints((3, 7), 21), rand_ints((3, 7), 22)
  for op in (operator.add, operator.sub, operator.mul):
    got = op(Tensor(a), Tensor(b))
    assert got.dtype == dtypes.int32 and got.tolist() == ref_ew(op, a, b)

def test_int_division_is_true_division():
  a, b = rand_ints((3, 7), 23), rand_ints((3, 7), 24, 1, 9)
  got = Tensor(a) / Tensor(b)
  assert got.dtype == dtypes.float32
  assert_close(got.tolist(), ref_ew(operator.truediv, a, b))

# ------------------------------------------------------------------------------------------------------------------
# broadcasting

@pytest.mark.parametrize("sa, sb", [((3, 1), (1, 7)), ((5, 1, 3), (7, 1)), ((1,), (1003,)), ((), (3, 7)),
                                    ((1, 1), (7, 33)), ((7, 33), (33,))])
def test_elementwise_broadcasts_like_numpy(sa, sb):
  a, b = rand_list(sa, 25), rand_list(sb, 26)
  got = Tensor(a) * Tensor(b) + Tensor(b)
  assert got.shape == broadcast_shape(sa, sb)
  assert_close(got.tolist(), ref_ew(lambda x, y: x * y + y, a, b))

# ------------------------------------------------------------------------------------------------------------------
# reductions

REDUCTIONS = {"sum": (Tensor.sum, math.fsum), "max": (Tensor.max, max), "min": (Tensor.min, min),
              "mean": (Tensor.mean, mean)}

@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("shape, axis, keepdim", [((3, 7), None, False), ((3, 7), 0, False), ((3, 7), 1, True),
                                                  ((3, 7), -1, False), ((5, 1, 3), (0, 2), False), ((5, 1, 3), 1, True),
                                                  ((7, 33), (0, 1), True), ((1003,), 0, False)])
def test_reduction_matches_reference(name, shape, axis, keepdim):
  op, ref = REDUCTIONS[name]
  x = rand_list(shape, 27)
  got = op(Tensor(x), axis=axis, keepdim=keepdim)
  want = ref_reduce(ref, x, axis, keepdim)
  assert got.shape == shape_of(want)
  assert_close(got.tolist(), want, atol=1e-4)

@pytest.mark.parametrize("shape", [(7, 4099), (4096, 1027), (3, 40_003)])
def test_long_rows_reduce_in_vector_accumulators_by_their_own_op(shape):
  """Rows long enough for vector accumulators: each keeps its reduce's op and identity (all negative: a sum from 0
  would show), and a nan in a row wins its max."""
  x = rand_list(shape, 11, -9.0, -1.0)
  x[1][shape[1] // 2] = math.nan
  got_max, got_sum = Tensor(x).max(axis=1).tolist(), Tensor(x).sum(axis=1).tolist()
  assert math.isnan(got_max[1]) and math.isnan(got_sum[1])
  assert_close([m for i, m in enumerate(got_max) if i != 1], [max(r) for i, r in enumerate(x) if i != 1])
  assert_close([m for i, m in enumerate(got_sum) if i != 1], [math.fsum(r) for i, r in enumerate(x) if i != 1],
               rtol=1e-4)

def test_reduce_of_a_broadcast_value():
  x = rand_list((3, 1), 70)
  assert_close(Tensor(x).expand(3, 7).sum(axis=1).tolist(), ref_ew(lambda v: 7 * v, [r[0] for r in x]))
  assert Tensor.ones(3, 7).sum().item() == 21.0 and Tensor([[2.5]]).expand(5, 3).max(axis=0).tolist() == [2.5] * 3

def test_reduce_over_a_padded_view_counts_the_padding():
  x = rand_list((3, 7), 71, -5, -1)  # all negative, so the padding's 0 is the max
  padded = ref_pad(x, ((1, 1), (0, 2)))
  assert Tensor(x).pad(((1, 1), (0, 2))).max(axis=0).tolist() == ref_reduce(max, padded, 0)
  assert_close(Tensor(x).pad(((1, 1), (0, 2))).sum(axis=1).tolist(), ref_reduce(math.fsum, padded, 1))

def test_sum_of_many_elements():
  x = rand_list((100003,), 28)
  assert_close(Tensor(x).sum().item(), math.fsum(x), atol=1e-2)

@pytest.mark.parametrize("n", [40009, 2**22 + 3])  # prime: padded to the split; big enough for CPU threads
def test_big_reductions_split_in_two_kernels(n):
  x = rand_list((n,), 29)
  assert [p.name[0] for p in tiny.render(Tensor(x).max())] == ["r", "r"]
  assert Tensor(x).max().item() == max(x) and Tensor(x).min().item() == min(x)
  assert_close(Tensor(x).sum().item(), math.fsum(x), rtol=1e-4)

@pytest.mark.parametrize("n", [10_000_000, 3 * 2**20 + 1])  # parts of over 2**15 elements are not split again
def test_a_split_reduction_is_two_kernels_however_long_its_parts(n):
  assert len(tiny.render(Tensor.empty(n).sum())) == len(tiny.render(Tensor.empty(n, 3).max(axis=0))) == 2
  assert len(tiny.render(Tensor.empty(n).softmax())) == 5  # max and sum each split, then the normalize
  assert Tensor.full((n,), 0.5).sum().item() == n / 2

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_reductions_of_empty_tensors_give_the_identity(device):
  assert Tensor.zeros(0, device=device).sum().tolist() == 0.0 and (Tensor.zeros(0, 3, device=device) + 1).tolist() == []
  assert Tensor.zeros(3, 0, device=device).max(axis=1).tolist() == [-math.inf] * 3
  assert math.isnan(Tensor.zeros(0, device=device).mean().item())

def test_sum_of_bool_counts_true_values():
  x = rand_list((7, 33), 29)
  got = (Tensor(x) > 0).sum(axis=1)
  assert got.dtype == dtypes.int64 and got.tolist() == ref_reduce(lambda v: sum(e > 0 for e in v), x, 1)

def test_int_reductions_stay_int():
  x = rand_ints((7, 33), 30)
  assert Tensor(x).sum(axis=0).dtype == dtypes.int64 and Tensor(x).sum(axis=0).tolist() == ref_reduce(sum, x, 0)
  assert Tensor(x).max(axis=1).tolist() == ref_reduce(max, x, 1)

# ------------------------------------------------------------------------------------------------------------------
# movement

@pytest.mark.parametrize("shape, new, want", [((3, 7), (7, -1), (7, 3)), ((3, 7), (21,), (21,)),
                                              ((5, 1, 3), (None, -1), (5, 3)),
                                              ((1003,), (17, 59), (17, 59)), ((7, 33), (3, 7, 11), (3, 7, 11))])
def test_reshape_keeps_row_major_order(shape, new, want):
  x = rand_list(shape, 31)
  got = Tensor(x).reshape(*new)
  assert got.shape == want and got.tolist() == ref_reshape(x, want)

VIEW_THEN_RESHAPE = {  # views whose element order is not row-major any more, so the reshape can't just relabel
  "permute": (lambda t: t.permute(1, 0), lambda x: ref_permute(x, (1, 0))),
  "flip": (lambda t: t.flip(1), lambda x: [r[::-1] for r in x]),
  "step": (lambda t: t[::2, 1::3], lambda x: [r[1::3] for r in x[::2]]),
  "pad": (lambda t: t.pad(((1, 0), (0, 1))), lambda x: ref_pad(x, ((1, 0), (0, 1)))),
  "expand": (lambda t: t[:, :1].expand(3, 5), lambda x: [[r[0]] * 5 for r in x]),
}

@pytest.mark.parametrize("view", VIEW_THEN_RESHAPE)
def test_reshape_of_a_view(view):
  make, ref = VIEW_THEN_RESHAPE[view]
  x = rand_list((3, 7), 72)
  want = ref(x)
  n = len(flat(want))
  assert make(Tensor(x)).reshape(n).tolist() == flat(want)
  assert make(Tensor(x)).reshape(-1, 1).tolist() == [[v] for v in flat(want)]

@pytest.mark.parametrize("shape, order", [((3, 7), (1, 0)), ((5, 1, 3), (2, 0, 1)), ((2, 3, 7), (1, 2, 0))])
def test_permute_reorders_axes(shape, order):
  x = rand_list(shape, 32)
  assert Tensor(x).permute(*order).tolist() == ref_permute(x, order) == Tensor(x).permute(order).tolist()

@pytest.mark.parametrize("shape, new, want", [((3, 1), (3, 7), (3, 7)), ((1,), (1003,), (1003,)),
                                              ((5, 1, 3), (5, 7, 3), (5, 7, 3)), ((1, 33), (7, -1), (7, 33))])
def test_expand_repeats_size_one_axes(shape, new, want):
  x = rand_list(shape, 33)
  got = Tensor(x).expand(*new)
  assert got.shape == want and got.tolist() == build(want, lambda idx: at(x, source_index(idx, shape)))

@pytest.mark.parametrize("shape, pads, value", [((3, 7), ((1, 2), (0, 3)), 0.0), ((1003,), ((5, 2),), -1.5),
                                                ((5, 1, 3), ((0, 0), (2, 1), (1, 1)), 2.0)])
def test_pad_surrounds_with_value(shape, pads, value):
  x = rand_list(shape, 34)
  got = Tensor(x).pad(pads) if value == 0 else Tensor(x).pad(pads, value=value)
  assert got.tolist() == ref_pad(x, pads, value)

@pytest.mark.parametrize("shape, bounds", [((3, 7), ((1, 3), (2, 7))), ((5, 1, 3), (None, (0, 1), (1, 2))),
                                           ((1003,), ((17, 1000),))])
def test_shrink_keeps_a_window(shape, bounds):
  x = rand_list(shape, 35)
  full = [b if b is not None else (0, s) for b, s in zip(bounds, shape)]
  want = build(tuple(e - b for b, e in full), lambda idx: at(x, tuple(i + b for i, (b, _) in zip(idx, full))))
  assert Tensor(x).shrink(bounds).tolist() == want

@pytest.mark.parametrize("shape, axis", [((3, 7), 0), ((3, 7), (0, 1)), ((5, 1, 3), -1), ((1003,), 0)])
def test_flip_reverses_axes(shape, axis):
  x = rand_list(shape, 36)
  axes = {a % len(shape) for a in ((axis,) if isinstance(axis, int) else axis)}
  def cell(idx): return at(x, tuple(s - 1 - i if d in axes else i for d, (i, s) in enumerate(zip(idx, shape))))
  want = build(shape, cell)
  assert Tensor(x).flip(axis).tolist() == want

def test_transpose_and_T():
  x, y = rand_list((3, 7), 37), rand_list((5, 1, 3), 38)
  assert Tensor(x).transpose().tolist() == Tensor(x).T.tolist() == ref_permute(x, (1, 0))
  assert Tensor(y).transpose(0, 2).tolist() == ref_permute(y, (2, 1, 0))

def test_squeeze_unsqueeze_flatten():
  x = rand_list((5, 1, 3), 39)
  t = Tensor(x)
  assert t.squeeze().shape == t.squeeze(1).shape == (5, 3) and t.squeeze(0).shape == (5, 1, 3)
  assert t.squeeze().tolist() == ref_reshape(x, (5, 3))
  assert t.unsqueeze(0).tolist() == [x] and t.unsqueeze(-1).tolist() == ref_reshape(x, (5, 1, 3, 1))
  assert t.flatten().tolist() == flat(x) and t.flatten(1).tolist() == ref_reshape(x, (5, 3))

GETITEM = [((3, 7), 1), ((3, 7), -1), ((3, 7), (slice(None), 2)), ((7, 33), (slice(1, 6, 2), slice(None, None, -3))),
           ((1003,), slice(None, None, -7)), ((1003,), slice(5, 900, 11)), ((5, 1, 3), (None, Ellipsis, 1)),
           ((5, 1, 3), (Ellipsis, -2)), ((5, 1, 3), (2, 0, slice(None, None, -1))),
           ((3, 7), (-2, None, slice(3, None)))]

@pytest.mark.parametrize("shape, key", GETITEM, ids=[f"{s}-{k}" for s, k in GETITEM])
def test_getitem_matches_python_indexing(shape, key):
  x = rand_list(shape, 40)
  got = Tensor(x)[key]
  want = ref_getitem(x, key)
  assert got.shape == shape_of(want) and got.tolist() == want

def test_cat_joins_along_dim():
  a, b, c = rand_list((3, 7), 41), rand_list((2, 7), 42), rand_list((3, 2), 43)
  assert Tensor.cat(Tensor(a), Tensor(b), dim=0).tolist() == ref_cat([a, b], 0)
  assert Tensor(a).cat(Tensor(c), Tensor(a), dim=1).tolist() == ref_cat([a, c, a], 1)
  assert Tensor(a).cat(Tensor(c), dim=-1).tolist() == ref_cat([a, c], 1)

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack_adds_a_dim(dim):
  xs = [rand_list((3, 7), 44 + i) for i in range(3)]
  d = dim % 3
  got = Tensor.stack(*[Tensor(x) for x in xs], dim=dim)
  assert got.tolist() == ref_cat([ref_unsqueeze(x, d) for x in xs], d)

def test_contiguous_and_clone_keep_values():
  x = rand_list((7, 33), 47)
  assert Tensor(x).permute(1, 0).contiguous().tolist() == ref_permute(x, (1, 0))
  t = Tensor(x)
  c = t.clone()
  assert c is not t and c.tolist() == x

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_window_inside_padding_reads_only_the_pad_value(device):  # the mask is empty, not "everything valid"
  x = Tensor([[1.0, 2.0]], device=device).pad(((1, 0), (0, 0))).shrink(((0, 1), (0, 2)))
  assert x.reshape(2).tolist() == [0.0, 0.0] and x.expand(3, 2).tolist() == [[0.0, 0.0]] * 3

def test_a_realized_result_is_read_not_recomputed_though_its_sources_were_realized_too():
  x = Tensor(rand_list((7, 13), 40))
  a = x + 1
  b = a * 2
  a.realize(), b.realize()
  prog, = tiny.render(b + 1)
  body = re.sub(r"/\*.*?\*/", "", prog.src.split("{", 1)[1])  # the code, without its comments
  assert "*" not in body.replace("*(", "").replace("*)", ""), prog.src  # no multiply left
  assert_close((b + 1).tolist(), ref_ew(lambda v: f32(f32(v + 1) * 2) + 1, x.tolist()))

def test_views_of_computed_values():
  x, y = rand_list((7, 3), 48), rand_list((2, 11), 49)
  got = ((Tensor(x) * 2).permute(1, 0)[1:, ::-2].pad(((0, 0), (3, 4))) + Tensor(y))
  view = ref_getitem(ref_permute(ref_ew(lambda v: v * 2, x), (1, 0)), (slice(1, None), slice(None, None, -2)))
  want = ref_ew(operator.add, ref_pad(view, ((0, 0), (3, 4))), y)
  assert_close(got.tolist(), want)

# ------------------------------------------------------------------------------------------------------------------
# composites

MATMUL_SHAPES = [((7,), (7,)), ((3, 7), (7,)), ((7,), (7, 5)), ((3, 7), (7, 5)), ((1, 33), (33, 1)), ((33, 1), (1, 33)),
                 ((2, 3, 7), (2, 7, 5)), ((2, 3, 7), (7, 5)), ((1, 3, 7), (4, 7, 5))]

@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
def test_matmul_matches_reference(sa, sb):
  a, b = rand_list(sa, 50), rand_list(sb, 51)
  got = Tensor(a) @ Tensor(b)
  want = ref_matmul(a, b)
  assert got.shape == shape_of(want)
  assert_close(got.tolist(), want, atol=1e-5)

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.uint8])
def test_int_matmul_keeps_its_dtype_and_wraps_like_it(dtype):
  a, b = rand_ints((3, 7), 54, 0, 60), rand_ints((7, 5), 55, 0, 60)
  got = Tensor(a, dtype) @ Tensor(b, dtype)
  assert got.dtype == dtype and got.tolist() == ref_ew(lambda v: tiny.truncate(dtype, v), ref_matmul(a, b))

def test_matmul_and_dot_methods_equal_operator():
  a, b = Tensor(rand_list((3, 7), 52)), Tensor(rand_list((7, 5), 53))
  assert a.matmul(b).tolist() == a.dot(b).tolist() == (a @ b).tolist()

@pytest.mark.parametrize("shape, axis", [((3, 7), -1), ((7, 33), -1), ((1003,), -1), ((5, 1, 3), 0)])
def test_softmax_matches_reference(shape, axis):
  x = rand_list(shape, 54, -5, 5)
  assert_close(Tensor(x).softmax(axis).tolist(), ref_softmax(x, axis), rtol=1e-4)

@pytest.mark.parametrize("shape, axis", [((3, 7), -1), ((7, 33), -1), ((5, 1, 3), 0)])
def test_log_softmax_matches_reference(shape, axis):
  x = rand_list(shape, 55, -5, 5)
  assert_close(Tensor(x).log_softmax(axis).tolist(), ref_softmax(x, axis, log=True), rtol=1e-4, atol=1e-5)

def test_softmax_is_stable_for_large_inputs():
  x = [[1000.0, 1001.0, 999.0], [-1000.0, -1003.0, -1001.0]]
  assert_close(Tensor(x).softmax().tolist(), ref_softmax(x, -1), rtol=1e-4)

# ------------------------------------------------------------------------------------------------------------------
# dtypes

PROMOTIONS = [(dtypes.float32, dtypes.int32, dtypes.float32), (dtypes.int32, dtypes.bool, dtypes.int32),
              (dtypes.int8, dtypes.int32, dtypes.int32), (dtypes.int32, dtypes.int64, dtypes.int64),
              (dtypes.float16, dtypes.float32, dtypes.float32)]

@pytest.mark.parametrize("a, b, want", PROMOTIONS)
def test_binary_op_promotes_dtype(a, b, want):
  got = Tensor([1, 0, 1], dtype=a) + Tensor([1, 1, 0], dtype=b)
  assert got.dtype == want and got.tolist() == [2, 1, 1]

def test_signed_with_unsigned_promotes_to_a_wider_signed_int():  # as torch's
  got = Tensor([1, 200], dtype=dtypes.uint8) + Tensor([-2, 3], dtype=dtypes.int8)
  assert got.dtype == dtypes.int16 and got.tolist() == [-1, 203]
  for a, b, want in [(dtypes.uint8, dtypes.int16, dtypes.int16), (dtypes.uint16, dtypes.int16, dtypes.int32),
                     (dtypes.uint16, dtypes.int8, dtypes.int32), (dtypes.uint32, dtypes.int16, dtypes.int64)]:
    assert dtypes.promote(a, b) == dtypes.promote(b, a) == want

def test_uint32_with_int32_promotes_to_int64():
  got = Tensor([3000000000, 5], dtype=dtypes.uint32) + Tensor([0, -7])
  assert got.dtype == dtypes.int64 and got.tolist() == [3000000000, -2]

def test_int_tensor_with_float_scalar_becomes_float():
  got = Tensor([1, 2, 3]) * 1.5
  assert got.dtype == dtypes.float32 and got.tolist() == [1.5, 3.0, 4.5]

def test_float16_rounds_to_half_precision():
  x = rand_list((33,), 56)
  t = Tensor(x, dtype=dtypes.float16)
  assert t.dtype == dtypes.float16 and t.tolist() == [f16(v) for v in x]
  assert Tensor(x).cast(dtypes.float16).float().tolist() == [f16(v) for v in x]

def test_float16_arithmetic_and_sum():
  x = [f16(v) for v in rand_list((33,), 73)]
  t = Tensor(x, dtype=dtypes.float16)
  assert (t * 2).dtype == dtypes.float16 and (t * 2).tolist() == [2 * v for v in x]  # doubling is exact
  assert t.sum().dtype == dtypes.float16
  assert_close(t.sum().item(), math.fsum(x), rtol=1e-3, atol=1e-2)  # one rounding to half at the end

BF16_EDGES = [0.0, -0.0, 1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -2.5, 65504.0, 3.3895313892515355e38,
              3.4e38, -3.39e38, 1e-40, 2**-133, 2**-134, 3 * 2**-135, 2**-126 - 2**-134, math.inf, -math.inf]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_bfloat16_rounds_to_the_nearest_even_on_the_host_and_in_a_kernel(device):  # ties, subnormals, overflow
  x = BF16_EDGES + rand_list((37,), 61, -1e3, 1e3)
  want = struct.pack(f"{len(x)}f", *map(bf16, x))  # bitwise: -0.0 is not 0.0
  made, cast = Tensor(x, dtype=dtypes.bfloat16, device=device), Tensor(x, device=device).bfloat16()
  assert made.dtype == cast.dtype == dtypes.bfloat16 and made.nbytes() == 2 * len(x)
  assert struct.pack(f"{len(x)}f", *made.tolist()) == want and struct.pack(f"{len(x)}f", *cast.tolist()) == want
  assert math.isnan(Tensor([math.nan], device=device).bfloat16().item())

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_bfloat16_ops_compute_in_float32_and_round_each_result(device):
  x, y = ([[bf16(v) for v in row] for row in rand_list((5, 7), seed)] for seed in (62, 63))
  a, b = Tensor(x, dtype=dtypes.bfloat16, device=device), Tensor(y, dtype=dtypes.bfloat16, device=device)
  for got, fn in [(a + b, operator.add), (a * b, operator.mul), (a - b * 3, lambda p, q: p - bf16(q * 3)),
                  (a.maximum(b), max), ((a < b).where(a, -b), lambda p, q: p if p < q else -q)]:
    assert got.dtype == dtypes.bfloat16 and got.tolist() == ref_ew(lambda p, q: bf16(fn(p, q)), x, y)
  assert (a * 7).int().tolist() == ref_ew(lambda p: math.trunc(bf16(7 * p)), x)
  assert a.max(1).tolist() == [max(row) for row in x]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_bfloat16_sums_and_matmuls_add_up_in_float32(device):  # rounded once, at the end: 8 bits are a sum's noise
  x = [[bf16(v) for v in row] for row in rand_list((7, 33), 64)]
  w = [[bf16(v) for v in row] for row in rand_list((33, 5), 65)]
  a, b = Tensor(x, dtype=dtypes.bfloat16, device=device), Tensor(w, dtype=dtypes.bfloat16, device=device)
  ones = Tensor.ones(1000, dtype=dtypes.bfloat16, device=device)
  assert ones.sum().dtype == dtypes.bfloat16 and ones.sum().item() == 1000.0  # (in bfloat16 it would stop at 256)
  assert (a @ b).dtype == dtypes.bfloat16
  assert_close((a @ b).tolist(), ref_ew(bf16, ref_matmul(x, w)), rtol=2**-8, atol=1e-6)
  assert_close(a.sum(1).tolist(), [bf16(math.fsum(row)) for row in x], rtol=2**-8, atol=1e-6)

def test_bfloat16_promotes_as_torch():
  half, bfloat = Tensor([1.5], dtype=dtypes.half), Tensor([2.5], dtype=dtypes.bfloat16)
  assert (half + bfloat).dtype == dtypes.float32 and (half + bfloat).tolist() == [4.0]  # neither holds the other
  assert (bfloat + 1).dtype == (bfloat * Tensor([3])).dtype == dtypes.bfloat16
  assert (bfloat + Tensor([1.0])).dtype == dtypes.float32
  assert bfloat.numpy().dtype.name == "float32"  # (tinygrad's: numpy has no bfloat16)
  with pytest.raises(TypeError, match="bfloat16"): bfloat.data()

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_int16_and_uint16_hold_their_range_and_wrap(device):
  x = rand_ints((7, 33), 58, -2**15, 2**15 - 1)
  s = Tensor(x, dtype=dtypes.short, device=device)
  assert s.dtype == dtypes.int16 and s.nbytes() == 2 * 7 * 33 and s.tolist() == x
  assert (s * 3 + 1).tolist() == ref_ew(lambda v: (3 * v + 1 + 2**15) % 2**16 - 2**15, x)
  u = Tensor([0, 65535, 40000], dtype=dtypes.ushort, device=device)
  assert (u + 1).tolist() == [1, 0, 40001] and (u > 50000).tolist() == [False, True, False]
  assert Tensor([70000, -1], device=device).cast(dtypes.ushort).tolist() == [4464, 65535]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_uint64_holds_its_range_and_wraps(device):
  x = [2**64 - 1, 0, 2**63, 12345678901234567890, 7]
  u = Tensor(x, dtype=dtypes.uint64, device=device)
  assert u.dtype == dtypes.ulong and u.tolist() == x and Tensor([2**63]).dtype == dtypes.uint64  # (as numpy)
  assert (u * 3 + 1).tolist() == [(3 * v + 1) % 2**64 for v in x] and (u // 7).tolist() == [v // 7 for v in x]
  assert (u >> 60).tolist() == [v >> 60 for v in x] and (u & 0xFFFFFFFF).tolist() == [v & 0xFFFFFFFF for v in x]
  assert (u > 2**63).tolist() == [v > 2**63 for v in x] and u.sum().item() == sum(x) % 2**64
  assert Tensor([2e19, -1.0, 1e19], device=device).cast(dtypes.uint64).tolist() == [2**64 - 1, 0, 9999999980506447872]
  with pytest.raises(tiny.DTypeError, match="no int holds both"): u + Tensor([1, 2, 3, 4, 5], device=device)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_float64_computes_in_double(device):  # a Python float's precision, constants included
  x = rand_list((5, 37), 59)
  d = Tensor(x, dtype=dtypes.double, device=device)
  assert d.dtype == dtypes.float64 and d.tolist() == x
  assert Tensor([0.1], dtype=dtypes.double, device=device).item() == 0.1 != Tensor([0.1], device=device).double().item()
  assert_close((d * 0.1 + 1 / 3).tolist(), ref_ew(lambda v: v * 0.1 + 1 / 3, x), rtol=1e-15, atol=1e-16)  # (a C
  assert_close((d / 7).tolist(), ref_ew(lambda v: v / 7, x), rtol=1e-15, atol=1e-16)  # compiler may fuse a * b + c)
  assert_close(d.sum(1).tolist(), [math.fsum(row) for row in x], rtol=1e-14, atol=1e-14)
  assert (d + Tensor([1.5], device=device)).dtype == dtypes.float64
  with pytest.raises(tiny.DTypeError, match="METAL has no double"): tiny.render(d * 2, device="METAL")

def test_int8_holds_its_whole_range():
  x = rand_ints((7, 33), 57, -128, 127)
  assert Tensor(x, dtype=dtypes.int8).tolist() == x and Tensor(x, dtype=dtypes.int8).dtype == dtypes.int8

def test_uint8_arithmetic_wraps():
  got = Tensor(bytes([200, 10, 255])) + Tensor(bytes([100, 10, 1]))
  assert got.dtype == dtypes.uint8 and got.tolist() == [44, 20, 0]
  assert Tensor([300, -1, 255]).cast(dtypes.uint8).tolist() == [44, 255, 255]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_narrow_int_arithmetic_wraps_like_the_machine(device):
  assert (Tensor([5, 0, 200], dtype=dtypes.uint8, device=device) - 1 < 10).tolist() == [True, False, False]
  assert ((Tensor([100, -3], dtype=dtypes.int8, device=device) * 2) >> 1).tolist() == [-28, -3]

def test_unsigned_and_extreme_ints_keep_their_order():
  a, b = Tensor([0, 7, 200], dtype=dtypes.uint8), Tensor([5, 3, 100], dtype=dtypes.uint8)
  assert a.minimum(b).tolist() == [0, 3, 100] and a.min().tolist() == 0 and a.abs().tolist() == [0, 7, 200]
  assert Tensor([-2**31, 0, 5]).min().tolist() == -2**31 and Tensor([True, False]).min().tolist() is False

def test_nan_is_neither_greater_nor_equal():
  assert (Tensor([math.nan, 1.0, 2.0]) >= 1).tolist() == [False, True, True]
  assert (Tensor([math.nan, 1.0, 0.5]) <= 1).tolist() == [False, True, True]

def test_half_overflow_is_infinity():
  assert Tensor([1e6, -1e6], dtype=dtypes.float16).tolist() == [math.inf, -math.inf]

def test_int64_keeps_values_beyond_int32():
  t = Tensor([2**40, -2**40 + 3, 7], dtype=dtypes.int64) * 3
  assert t.dtype == dtypes.int64 and t.tolist() == [3 * 2**40, 3 * (-2**40 + 3), 21]

# ------------------------------------------------------------------------------------------------------------------
# interop and output

def test_realize_returns_the_tensor():
  t = Tensor([1.0, 2.0]) + 1
  assert t.realize() is t

def test_item_of_single_element():
  assert Tensor([[2.5]]).item() == 2.5
  x = rand_list((3, 7), 58)
  assert_close(Tensor(x).sum().item(), math.fsum(flat(x)), atol=1e-5)

def test_from_float_array():
  x = rand_list((1003,), 59)
  t = Tensor(array.array("f", x))
  assert t.shape == (1003,) and t.dtype == dtypes.float32 and t.tolist() == x

def test_from_int_array():
  x = rand_ints((33,), 60, -2**31, 2**31 - 1)
  t = Tensor(array.array("i", x))
  assert t.dtype == dtypes.int32 and t.tolist() == x

def test_from_bytes_is_uint8():
  t = Tensor(bytes([0, 1, 127, 128, 255]))
  assert t.dtype == dtypes.uint8 and t.shape == (5,) and t.tolist() == [0, 1, 127, 128, 255]

def test_from_shaped_memoryview():
  x = rand_list((2, 3), 61)
  t = Tensor(memoryview(array.array("f", flat(x))).cast("B").cast("f", shape=[2, 3]))
  assert t.shape == (2, 3) and t.dtype == dtypes.float32 and t.tolist() == x

def test_numpy_returns_exact_dtype():
  np = pytest.importorskip("numpy")
  x = rand_list((3, 7), 62)
  for t, want in [(Tensor(x), np.float32), (Tensor(rand_ints((3, 7), 63)), np.int32), (Tensor(x) > 0, np.bool_)]:
    n = t.numpy()
    assert n.dtype == want and n.shape == t.shape and n.tolist() == t.tolist()

# ------------------------------------------------------------------------------------------------------------------
# laziness and fusion (kernel counts come from tiny.render, which runs nothing)

def store_count(src: str) -> int:
  """Assignments through a pointer or index (`p[i] = ...`, `*(p+i) = ...`), which is how every dialect stores."""
  return len(re.findall(r"[\]\)]\s*=(?!=)", src))

def test_elementwise_chain_is_one_kernel():
  a, b, c = realized((7, 33), (7, 33), (7, 33))
  kernels = tiny.render(a * b + c)
  assert len(kernels) == 1 and kernels[0].name.startswith("E_")

def test_elementwise_fuses_into_the_reduce():
  a, b, c = realized((7, 33), (7, 33), (7, 33))
  kernels = tiny.render((a * b + c).sum())
  assert len(kernels) == 1 and kernels[0].name.startswith("r_")

def test_elementwise_after_reduce_fuses_into_it():
  x, y = rand_list((7, 33), 64), rand_list((7, 33), 65)
  a, b = Tensor(x).realize(), Tensor(y).realize()
  t = (a + b).exp().sum(axis=1) * 2
  assert len(tiny.render(t)) == 1
  want = ref_reduce(lambda v: 2 * math.fsum(v), ref_ew(lambda p, q: math.exp(p + q), x, y), 1)
  assert_close(t.tolist(), want, rtol=1e-4)

def test_softmax_is_at_most_three_kernels():
  x, = realized((7, 33))
  assert len(tiny.render(x.softmax(-1))) <= 3

def test_matmul_is_one_kernel():
  a, b = realized((3, 7), (7, 5))
  assert len(tiny.render(a @ b)) == 1

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_relu_of_a_matmul_is_one_kernel_with_it(device):  # relu reads x twice, (x > 0).where(x, 0), in one kernel
  x, w, b = rand_list((7, 33), 95), rand_list((33, 13), 96), rand_list((13,), 97)
  out = (Tensor(x, device=device) @ Tensor(w, device=device) + Tensor(b, device=device)).relu()
  assert len(tiny.schedule([out])) == 1
  assert_close(out.tolist(), ref_ew(lambda v, c: max(v + c, 0.0), ref_matmul(x, w), b), rtol=1e-5)

def test_outputs_over_one_shape_share_one_kernel():
  a, b, c, d = realized((7, 33), (7, 33), (7, 33), (7, 33))
  out1, out2 = a + b + c, a + b + d
  kernels = tiny.render(out1, out2)
  assert len(kernels) == 1 and store_count(kernels[0].src) >= 2
  inputs = [t.tolist() for t in (a, b, c, d)]
  out1.realize(out2)  # both at once: this runs the two-store kernel
  assert_close(out1.tolist(), ref_ew(lambda *v: sum(v), *inputs[:3]))
  assert_close(out2.tolist(), ref_ew(lambda *v: sum(v), *inputs[:2], inputs[3]))
  assert [t.tolist() for t in (a, b, c, d)] == inputs

def test_dear_work_read_through_a_broadcast_is_stored_once():  # exp(x) would be computed once per column of w
  x, w = rand_list((37, 53), 70), rand_list((53, 19), 71)
  a, b = Tensor(x, device="CPU").realize(), Tensor(w, device="CPU").realize()
  kernels = tiny.render(a.exp() @ b)
  assert [k.name[0] for k in kernels] == ["E", "r"]
  assert_close((a.exp() @ b).tolist(), ref_matmul(ref_ew(math.exp, x), w), rtol=1e-4)
  kernels = tiny.render(a.softmax(-1) @ b)  # the rows' max, sum and normalized values (stored: dear), the matmul
  assert [(k.name[0], why) for k, why in zip(kernels, [i.why for i in tiny.schedule([a.softmax(-1) @ b])])] == \
    [("r", "dear"), ("r", "output")]
  assert_close((a.softmax(-1) @ b).tolist(), ref_matmul(ref_softmax(x, 1), w), rtol=1e-4)

# a row reduce broadcast back over its own row stays in one kernel: the row's reduces, then its outputs (a CPU runs
# them in turn, row by row; a GPU block's threads share each reduce, then the row's columns)
def test_a_softmax_row_is_one_kernel():
  for device in ("CPU", "PYTHON", "CUDA"):
    assert len(tiny.schedule([Tensor.empty(4096, 1024, device=device).softmax(-1)])) == 1
  assert len(tiny.schedule([Tensor.empty(10**6, device="CPU").softmax(-1)])) == 5  # one long row: split across cores

def test_a_cpu_row_program_fetches_the_next_row_as_it_computes_the_dear_loop():  # a GPU block has its own row
  cpu, = tiny.render(Tensor.empty(64, 1024, device="CPU").softmax(-1))
  cuda, = tiny.render(Tensor.empty(64, 1024, device="CUDA").softmax(-1))
  assert "__builtin_prefetch" in cpu.src and "prefetch" not in cuda.src

def test_cpu_threads_count_a_rows_reduces_once_a_row(monkeypatch):  # not once per column: 4 rows are too little work
  monkeypatch.setattr(tiny, "threads", lambda: 2)  # (shapes no other test lowers: programs are kept by kernel)
  small, = tiny.render(Tensor.empty(4, 1001, device="CPU").softmax(-1))
  big, = tiny.render(Tensor.empty(2046, 1024, device="CPU").softmax(-1))
  assert small.global_size[0] == 1 and big.global_size[0] == 2

def row_programs(x):  # (program, pure-Python reference, kernels)
  return [
    (lambda t: t.softmax(-1), lambda: ref_softmax(x, -1), 1),
    (lambda t: t.log_softmax(-1), lambda: ref_softmax(x, -1, log=True), 1),
    (lambda t: t - t.max(-1, keepdim=True), lambda: ref_ew(operator.sub, x, ref_reduce(max, x, -1, True)), 1),
    (lambda t: (t - t.mean(-1, keepdim=True)).square().sum(-1),  # a reduce of a row that read a reduce
     lambda: ref_reduce(lambda v: math.fsum((e - mean(v)) ** 2 for e in v), x, -1), 1),
    (lambda t: (t - t.max(-1, keepdim=True)).min(0),  # a reduce over the rows: the row's max is stored, or it would
     lambda: ref_reduce(min, ref_ew(operator.sub, x, ref_reduce(max, x, -1, True)), 0), 2),  # run again per column
    (lambda t: t.softmax(-1).sum(0), lambda: ref_reduce(math.fsum, ref_softmax(x, -1), 0), 3),
    (lambda t: t.softmax(0), lambda: ref_softmax(x, 0), 3)]  # a column's: not its own row

@pytest.mark.parametrize("shape", [(37, 53), (5, 1003), (3, 7, 36)])
def test_row_programs_in_one_kernel_at_every_cpu_width(cpu_width, shape):
  x = rand_list(shape, 152, -9.0, 9.0)
  for fn, want, kernels in row_programs(x):
    assert len(tiny.schedule([fn(Tensor(x, device="CPU"))])) == kernels
    assert_close(poisoned(fn, x).tolist(), want(), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("shape", [(29, 16), (37, 53), (9, 261)])
def test_a_cpu_softmax_row_computes_exp_once(cpu_width, shape):
  """The exp summed in the reduce's loop is stored in the output there and read back for the output, not computed
  again: the output loop has no exp (16 columns: no column loop, so only the order of the load after the stores
  keeps it right)."""
  x = rand_list(shape, 157, -9.0, 9.0)
  kernel, = tiny.render(Tensor(x, device="CPU").realize().softmax(-1))
  assert re.search(r"= [^;]*\bdata0\b", kernel.src), kernel.src  # the output, read back
  assert_close(poisoned(lambda t: t.softmax(-1), x).tolist(), ref_softmax(x, -1), rtol=1e-5, atol=1e-7)
  assert_close(poisoned(lambda t: t.softmax(-1) + t.exp().sum(-1, keepdim=True), x).tolist(),
               ref_ew(operator.add, ref_softmax(x, -1), ref_reduce(math.fsum, ref_ew(math.exp, x), -1, True)),
               rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("shape", [(4, 5, 6), (3, 7, 33)])
def test_a_row_program_whose_rows_are_not_its_outer_loops(cpu_width, shape):
  """softmax(-1).permute(0, 2, 1) loops over a row's columns outside part of its rows: an exp kept in the output while
  the row is summed would land on outputs already written, so it is computed again instead."""
  x = rand_list(shape, 158, -9.0, 9.0)
  assert_close(poisoned(lambda t: t.softmax(-1).permute(0, 2, 1), x).tolist(),
               ref_permute(ref_softmax(x, -1), (0, 2, 1)), rtol=1e-5, atol=1e-7)

@pytest.mark.parametrize("cols", [7, 40])
def test_a_row_value_beside_a_reduce_over_more_rows(cols):
  """f / f.sum(-1) broadcast over a middle axis, beside a row max that varies with it: the sum's loop runs outside
  that axis, so its exps are not stored from there (and the kernel lowers)."""
  x, y = rand_list((3, cols), 165, -1.0, 1.0), rand_list((3, 2, cols), 166, -1.0, 1.0)
  def fn(a, b):
    f = (a * a + 1).sqrt() * 3 + 1
    return (f / f.sum(-1, keepdim=True)).reshape(3, 1, cols).expand(3, 2, cols) + (b - b.max(-1, keepdim=True))
  f = ref_ew(lambda v: math.sqrt(v * v + 1) * 3 + 1, x)
  want = [[[fr[c] / math.fsum(fr) + yr[c] - max(yr) for c in range(cols)] for yr in ys] for fr, ys in zip(f, y)]
  assert_close(poisoned(fn, x, y).tolist(), want, rtol=1e-5, atol=1e-5)

def test_vectors_of_comparisons_reduce_and_compare_as_bools(cpu_width):
  """A vector of comparisons holds -1 for true: max (any) and min (all) over them, and bools compared, are still
  false < true."""
  x, y = rand_list((5, 36), 158, -1.0, 1.0), rand_list((5, 36), 159, -1.0, 1.0)
  tx, ty = Tensor(x, device="CPU"), Tensor(y, device="CPU")
  lt = ref_ew(lambda a, b: (a < 0.5) < (b < 0.3), x, y)
  assert ((tx < 0.5) < (ty < 0.3)).tolist() == lt
  assert ((tx < 0.5) < (ty < 0.3)).max(-1).tolist() == ref_reduce(max, lt, -1)
  assert (tx < 0.5).max(-1).tolist() == ref_reduce(max, ref_ew(lambda a: a < 0.5, x), -1)
  assert (tx < 0.5).min(-1).tolist() == ref_reduce(min, ref_ew(lambda a: a < 0.5, x), -1)


@pytest.mark.parametrize("n", [5, 37])
def test_bool_arithmetic_is_or_and_and_at_every_cpu_width(cpu_width, n):
  """A bool holds n != 0: + is or, * is and, on scalars and on vector lanes, where true is the mask -1."""
  x, y = rand_list((n,), 178), rand_list((n,), 179)
  a, b = Tensor(x, device="CPU") > 0, Tensor(y, device="CPU") > 0.5
  ors, ands = [p > 0 or q > 0.5 for p, q in zip(x, y)], [p > 0 and q > 0.5 for p, q in zip(x, y)]
  assert (a + b).tolist() == ors and (a * b).tolist() == ands and (a + a).tolist() == (a * a).tolist()
  assert (a * b).int().tolist() == [int(v) for v in ands] and (a + b).sum().item() == sum(ors)
  assert ((a * b + a) == a).tolist() == [True] * n  # (a and b) or a is a

@pytest.mark.parametrize("shape", [(37, 53), (3, 7, 36), (2, 3, 5)])
def test_row_programs_run_a_block_per_row_on_the_emulator(shape):
  x = rand_list(shape, 154, -9.0, 9.0)
  for fn, want, kernels in row_programs(x):
    assert len(tiny.schedule([fn(Tensor(x, device="PYTHON"))])) == kernels
    assert_close(poisoned(fn, x, device="PYTHON").tolist(), want(), rtol=1e-5, atol=1e-5)

def test_a_row_reduce_beside_a_matmul_on_the_emulator():  # the matmul's reduce varies with every column: no row loop
  x, w = rand_list((2, 30), 155), rand_list((30, 30), 156)
  fn = lambda a, b: a @ b + a.sum(-1, keepdim=True)
  want = ref_ew(operator.add, ref_matmul(x, w), ref_reduce(math.fsum, x, -1, True))
  assert_close(poisoned(fn, x, w, device="PYTHON").tolist(), want, rtol=1e-5, atol=1e-5)
  kernel, = tiny.render(fn(Tensor.empty(2, 300, device="CUDA"), Tensor.empty(300, 300, device="CUDA")))
  assert math.prod(kernel.local_size) <= 1024, kernel.local_size

def test_each_reduce_of_a_row_shares_the_gpu_block():  # the mean and the squares about it: two shared folds, in turn
  t = Tensor.empty(512, 1000, device="CUDA")
  kernel, = tiny.render((t - t.mean(-1, keepdim=True)).square().sum(-1))
  assert kernel.src.count("__shared__") == 2 and kernel.local_size == (256, 1, 1), kernel.src

def test_a_softmax_row_is_correct_on_the_emulator():  # 261 columns: each of a block's 256 threads loops past them
  x = rand_list((3, 261), 153, -9.0, 9.0)
  assert_close(Tensor(x, device="PYTHON").softmax(-1).tolist(), ref_softmax(x, -1), rtol=1e-5, atol=1e-7)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_row_program_over_a_stored_reduce_is_one_kernel(device):
  """A matmul read by a row's max, sum and outputs is stored; the log_softmax over it is then one row program, as
  over any buffer (its max is not stored as if it ran under the matmul's reduce)."""
  x, w = rand_list((37, 53), 163), rand_list((53, 11), 164)
  fn = lambda a, b: (a @ b).log_softmax(-1)
  assert len(tiny.schedule([fn(Tensor(x, device=device), Tensor(w, device=device))])) == 2
  assert_close(poisoned(fn, x, w, device=device).tolist(), ref_softmax(ref_matmul(x, w), -1, log=True),
               rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_small_row_reduce_read_twice_is_computed_in_each_readers_kernel(device):
  """A loss's log_softmax and its gradient both read each row's max and sum: rows this small cost less to reduce again
  in each kernel than a kernel of their own (loss rows, their mean, the gradient: 3 kernels, not 6)."""
  x = rand_list((7, 10), 165, -3.0, 3.0)
  y = [[float(k == (3 * i) % 10) for k in range(10)] for i in range(7)]
  logits = Tensor(x, device=device, requires_grad=True)
  loss = -(logits.log_softmax(-1) * Tensor(y, device=device)).sum(-1).mean()
  grad, = loss.gradient(logits)
  assert len(tiny.schedule([loss, grad])) == 3
  p = ref_softmax(x, -1)
  want = [[(p[i][k] * sum(y[i]) - y[i][k]) / 7 for k in range(10)] for i in range(7)]
  assert_close(grad.tolist(), want, rtol=1e-5, atol=1e-6)
  assert_close(loss.item(), -sum(math.log(p[i][k]) * y[i][k] for i in range(7) for k in range(10)) / 7, rtol=1e-5)

def test_a_small_row_reduce_read_twice_under_a_reduce_over_its_rows_is_stored():
  """Under a sum over the rows, the row's reduce would be computed again for each column that sum makes: it is
  stored, however small."""
  x = rand_list((8, 10), 166, -2.0, 2.0)
  def fn(t):
    s = t.exp().sum(-1, keepdim=True)
    return (t * s.log() + t * s.sqrt()).sum(0)
  assert [k.name for k in tiny.render(fn(Tensor(x)))] == ["r_8_10", "E_8", "r_10_1_8"]
  sums = [math.fsum(math.exp(v) for v in row) for row in x]
  want = [math.fsum(x[i][j] * (math.log(sums[i]) + math.sqrt(sums[i])) for i in range(8)) for j in range(10)]
  assert_close(poisoned(fn, x).tolist(), want, rtol=1e-5, atol=1e-5)

def test_a_cpu_matmul_reads_wide_rows_of_b_packed(cpu_width):
  """Rows of b 1024 floats or more apart are stored first in tiles of the kernel's vector columns (a TLB miss a step,
  otherwise), broadcast over a batch too, and so is a b read transposed (no columns side by side) over 256 rows or
  more (fewer are summed along the rows of both, in vectors); a GPU's is read as it is."""
  a, b, c = rand_list((33, 70), 167), rand_list((70, 1088), 168), rand_list((2, 17, 70), 169)
  fn = lambda x, w: x @ w
  def kernels(rows): return len(tiny.schedule([fn(Tensor.empty(rows, 70, device="CPU"),
                                                  Tensor.empty(70, 1088, device="CPU"))]))
  assert kernels(33) == 2 and kernels(1) == 1  # one row doesn't pay for the copy
  assert_close(poisoned(fn, a, b).tolist(), ref_matmul(a, b), rtol=1e-5, atol=1e-5)
  assert_close(poisoned(fn, c, b).tolist(), [ref_matmul(m, b) for m in c], rtol=1e-5, atol=1e-5)
  bt = [list(col) for col in zip(*b)]
  def transposed(rows): return len(tiny.schedule([Tensor.empty(rows, 70, device="CPU") @
                                                  Tensor.empty(1088, 70, device="CPU").T]))
  assert transposed(256) == 2 and transposed(255) == 1
  assert_close(poisoned(lambda x, w: x @ w.T, a, bt).tolist(), ref_matmul(a, b), rtol=1e-5, atol=1e-5)
  tall, narrow = rand_list((256, 70), 170), rand_list((64, 70), 171)  # (packed: 64 columns make whole tiles)
  want = ref_matmul(tall, [list(col) for col in zip(*narrow)])
  assert_close(poisoned(lambda x, w: x @ w.T, tall, narrow).tolist(), want, rtol=1e-5, atol=1e-5)
  assert len(tiny.schedule([Tensor.empty(33, 70, device="PYTHON") @ Tensor.empty(70, 1088, device="PYTHON")])) == 1

def test_a_b_about_to_be_stored_is_stored_in_the_matmuls_tiles_instead(cpu_width):
  """b made contiguous in the same graph (a conv's im2col windows) is stored once, as (N/T, K, T): no copy after."""
  a, b = rand_list((33, 70), 175), rand_list((70, 1088), 176)
  fn = lambda x, w: x @ (w * 2).contiguous()
  store, _ = tiny.render(fn(Tensor.empty(33, 70, device="CPU"), Tensor.empty(70, 1088, device="CPU")))
  assert store.name.startswith(f"E_{1088 // (4 * cpu_width)}_70_"), store.name
  assert_close(poisoned(fn, a, b).tolist(), ref_matmul(a, [[2 * v for v in row] for row in b]), rtol=1e-5, atol=1e-5)

def test_a_cpu_matmul_of_a_transposed_b_too_small_to_pack_keeps_a_small_tile(cpu_width):
  """b's columns are a row apart, so they can't be vectors: a tile as wide as four of them would be 256 scalars, each
  with its own cos inlined (20,000 lines of C, 25 s to compile)."""
  a, b = rand_list((4, 8), 173), rand_list((64, 8), 174)
  prog, = tiny.render((Tensor(a, device="CPU") @ Tensor(b, device="CPU").T).cos())
  assert prog.opts.startswith("upcast 64:4 "), prog.opts
  want = [[math.cos(v) for v in row] for row in ref_matmul(a, [list(c) for c in zip(*b)])]
  assert_close(poisoned(lambda x, w: (x @ w.T).cos(), a, b).tolist(), want, rtol=1e-5, atol=1e-5)

def test_cheap_work_is_recomputed_where_it_is_read():
  a, b, w = realized((37, 53), (37, 53), (53, 3))
  assert len(tiny.render((a + 1) @ w)) == 1  # one add per 3 reads: cheaper than storing
  t = a + b
  assert len(tiny.render(t.sum(0), t.sum(1))) == 2  # read by two kernels of different shapes, computed in each
  assert len(tiny.render(a.exp() * 2)) == 1  # dear, but read once
  # dear and read by both sides of a where and its condition, whose paths meet again there: computed once, not stored
  e = a.exp()
  assert [len(i.outs) for i in tiny.schedule([(e > 1).where(e.sqrt() * 2 + 1, (e * e + 1).log())])] == [1]
  assert [[len(i.outs) for i in tiny.schedule([f(a)])] for f in (Tensor.gelu, Tensor.tanh, Tensor.mish)] == [[1]] * 3

def test_debug2_says_why_each_kernel_stores(monkeypatch, capsys):
  a, w = realized((37, 53), (53, 19))
  monkeypatch.setenv("DEBUG", "2")
  (a.exp() @ w).realize()
  lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("***")]
  assert [line[4] for line in lines] == ["dear", "output"]

def test_context_sets_a_setting_for_a_block_or_a_function(monkeypatch, capsys):
  monkeypatch.delenv("DEBUG", raising=False)
  a = Tensor(rand_list((3, 7), 1)).realize()
  with tiny.Context(DEBUG=2): (a * 3).realize()
  assert "DEBUG" not in os.environ
  @tiny.Context(DEBUG=2, NOOPT=1)
  def run(): return (a * 5).realize()
  run()
  assert "DEBUG" not in os.environ and "NOOPT" not in os.environ
  monkeypatch.setenv("DEBUG", "1")
  with tiny.Context(DEBUG=0): (a * 7).realize()
  assert os.environ["DEBUG"] == "1"
  lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("***")]
  assert len(lines) == 2 and lines[1].endswith(" ")  # (NOOPT: no opts listed)

def test_global_counters_count_kernels_their_work_and_memory():
  n = 1001
  a, b = realized((n,), (n,))
  GC = tiny.GlobalCounters
  (a * b + 1).realize()
  GC.reset()
  (a * b + 1).realize()
  assert (GC.kernel_count, GC.global_ops, GC.global_mem) == (1, 2 * n, 3 * 4 * n)  # a mul and an add; 3 buffers
  used = GC.mem_used
  t = (a + 2).realize()
  assert GC.mem_used - used == t.buffer().allocated >= 4 * n
  del t
  assert GC.mem_used == used
  @tiny.TinyJit
  def f(x, y): return x * y + 1, (x - y).sum()
  for _ in range(3): f(a, b)
  GC.reset()
  f(a, b)  # a replay: its two kernels, as one call
  assert (GC.kernel_count, GC.global_ops) == (2, 2 * n + 3 * n)  # (x - y is x + -y; then the sum's adds)

def test_render_describes_kernels_without_running_them():
  a, b = realized((3, 7), (3, 7))
  t = a * b
  kernels = tiny.render(t)
  assert len(tiny.render(t)) == len(kernels) == 1
  k = kernels[0]
  assert isinstance(k.src, str) and k.name in k.src and k.global_size is not None and k.local_size is not None

def test_long_elementwise_chain_does_not_hit_the_recursion_limit():
  x = Tensor([1.0, 2.0])
  for _ in range(3000): x = x + 1
  assert x.tolist() == [3001.0, 3002.0]

def test_threaded_cpu_kernel_writes_every_element():  # big enough to split across cores, with a tail in each
  n = 2**22 + 3
  a, b = Tensor.arange(n), Tensor.arange(n).flip(0)
  got = (a * 2 + b).tolist()
  assert got == [2 * i + (n - 1 - i) for i in range(n)]

def test_a_reduce_read_twice_by_one_op_stays_in_its_kernel():
  s = Tensor(rand_list((8, 16), 50)).sum(axis=1)
  assert len(tiny.render(s * s)) == 1

def test_threads_split_a_loop_shorter_than_the_cores():  # 2 rows of 2**22: the thread split must not break
  x = Tensor.arange(2**22 * 2).reshape(2**22, 2).T + 1
  assert x.shape == (2, 2**22) and x[1, -3:].tolist() == [2**23 - 4, 2**23 - 2, 2**23]

def test_outputs_realized_together_run_after_what_they_read():  # b needs a's max: its kernel can't run first
  x = rand_list((4, 8), 51)
  a, b = Tensor(x) * 2, Tensor(x) - Tensor(x).max(axis=1, keepdim=True)
  Tensor.realize(a, b)
  assert_close(a.tolist(), ref_ew(lambda v: 2 * v, x))
  assert_close(b.tolist(), [[v - max(row) for v in row] for row in x])

def test_padding_around_an_empty_tensor():  # a zero-size dim must not divide any index by zero
  t = (Tensor.ones(5, 3, 4).shrink(((0, 5), (1, 1), (0, 1))) + 1).pad(((1, 0), (0, 0), (1, 0)), value=-1.0)
  got = t.permute(0, 2, 1).pad(((0, 0), (1, 1), (1, 2)))
  assert got.shape == (6, 4, 3) and got.tolist() == [[[0.0] * 3] * 4] * 6
  assert Tensor.ones(4, 5, 0).sum(axis=1).shape == (4, 0) and Tensor.ones(4, 0)[:, ::2].shape == (4, 0)

def test_realized_tensor_is_read_not_recomputed():
  x = rand_list((7, 33), 66)
  s = Tensor(x).sum(axis=1).realize()
  assert len(tiny.render(s)) == 0
  later = s * 2
  kernels = tiny.render(later)
  assert len(kernels) == 1 and kernels[0].name.startswith("E_")
  assert_close(later.tolist(), ref_reduce(lambda v: 2 * math.fsum(v), x, 1), atol=1e-5)

def free_poisoned_buffer(shape):
  """Leaves a freed NaN-filled buffer of `shape` behind, which the allocator may hand to the next output of that size;
  an element the kernel forgets to write then reads as NaN."""
  poison = Tensor(build(shape, lambda _: math.nan)).realize()
  del poison
  gc.collect()

@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (1003,)])
def test_every_output_element_is_written(shape):
  a, b = realized(shape, shape, seed=67)  # inputs first, so that the poisoned buffer goes to the output
  free_poisoned_buffer(shape)
  assert_close((a * b - 1).tolist(), ref_ew(lambda x, y: x * y - 1, a.tolist(), b.tolist()))

def test_every_reduce_output_is_written():
  x, = realized((33, 7), seed=69)
  free_poisoned_buffer((33,))
  assert_close(x.max(axis=1).tolist(), ref_reduce(max, x.tolist(), 1))

# ------------------------------------------------------------------------------------------------------------------
# random programs: 3 to 12 ops drawn from a table by a seeded generator. The reference runs each op as it is drawn, so
# that an op's arguments can depend on the values it meets; tiny runs the program after. A failing seed prints it.

INT_BITS = {dtypes.int32: 32, dtypes.int8: 8, dtypes.uint8: 8, dtypes.int64: 64}
INT_RANGES = {dtypes.int32: (-99, 99), dtypes.int8: (-128, 127), dtypes.uint8: (0, 255),
              dtypes.int64: (-99, 99), dtypes.bool: (0, 1)}
F32, INTS, BOOL = (dtypes.float32,), tuple(INT_BITS), (dtypes.bool,)
NUMBERS, ALL = F32 + INTS, F32 + INTS + BOOL
SIGNED = F32 + (dtypes.int32, dtypes.int8, dtypes.int64)  # (a negative Python int with a uint8 tensor makes int64)

def wrap(dtype, v):
  """v as dtype holds it: float32 rounded, bool nonzero, ints truncated and wrapped around their width."""
  if dtype == dtypes.float32: return f32(v)
  if dtype == dtypes.bool: return bool(v)
  v = int(v) % 2**INT_BITS[dtype]
  return v - 2**INT_BITS[dtype] if dtype != dtypes.uint8 and v >= 2**(INT_BITS[dtype] - 1) else v

@dataclasses.dataclass(frozen=True)
class Input:  # a tensor a random program reads
  shape: tuple
  dtype: tiny.DType
  seed: int
  def values(self):
    if self.dtype == dtypes.float32:  # uniform floats, never all zeros; in 1 of 3 inputs some are 0.0 and -0.0
      rng = random.Random(self.seed)
      zero = (lambda: rng.random() < 0.2) if self.seed % 3 == 0 else (lambda: False)
      return ref_ew(lambda v: rng.choice((0.0, -0.0)) if zero() else v, rand_list(self.shape, self.seed))
    ints = ref_ew(lambda v: wrap(self.dtype, v), rand_ints(self.shape, self.seed, *INT_RANGES[self.dtype]))
    return ints if any(flat(ints)) else Input(self.shape, self.dtype, self.seed + 1).values()

def ref_value(arg): return arg.values() if isinstance(arg, Input) else arg

def promoted(dtype, *args):
  """The dtype x and args meet in: float over ints over bool; two different ints meet in int32, or int64 if either is.
  A Python int or bool takes x's dtype, a Python float makes it float32."""
  ds = {dtype} | {a.dtype if isinstance(a, Input) else dtypes.float32 if isinstance(a, float) else dtype for a in args}
  if dtypes.float32 in ds: return dtypes.float32
  ds = ds - {dtypes.bool} or {dtypes.bool}
  return ds.pop() if len(ds) == 1 else dtypes.int64 if dtypes.int64 in ds else dtypes.int32

def random_shape(rng, limit) -> tuple:  # odd sizes: never only powers of two
  if limit >= 1003 and rng.random() < 0.1: return rng.choice([(1003,), (17, 59), (59, 1, 17)])
  while True:
    shape = tuple(rng.randint(1, 17) for _ in range(rng.randint(1, 4)))
    if math.prod(shape) <= limit and any(s & (s - 1) for s in shape): return shape

def scalar(rng, dtype):  # a Python number that dtype holds as it is
  if dtype == dtypes.float32: return f32(rng.uniform(-2, 2))
  return rng.random() < 0.5 if dtype == dtypes.bool else rng.randint(0 if dtype == dtypes.uint8 else -9, 9)

def operand(rng, shape, dtype, limit, scalar_ok=True):
  """A Python scalar, or an input whose shape broadcasts with `shape`: some dims 1, some 1s stretched, fewer dims."""
  if scalar_ok and rng.random() < 0.4: return scalar(rng, dtype)
  other = tuple(1 if rng.random() < 0.3 else rng.randint(2, 5) if s == 1 and rng.random() < 0.5 else s for s in shape)
  other = other[rng.randint(0, len(other)):] if rng.random() < 0.3 else other
  return Input(other if math.prod(broadcast_shape(shape, other)) <= limit else shape, dtype, rng.randrange(10**6))

# an op's draw: (rng, x, dtype, limit) -> its arguments, or None where they would let float rounding flip a result
def nothing(rng, x, dtype, limit): return ()
def same_dtype(rng, x, dtype, limit): return (operand(rng, shape_of(x), dtype, limit),)
def any_dtype(rng, x, dtype, limit):  # 1 in 4 of another dtype (a Python float or bool too): both meet in promoted()
  other = rng.choice(ALL) if rng.random() < 0.25 else dtype
  if rng.random() < 0.4: return (scalar(rng, other if other in F32 + BOOL else dtype),)
  return (operand(rng, shape_of(x), other, limit, scalar_ok=False),)
def margin(x) -> float: return 1e-3 * max(1.0, *map(abs, flat(x)))  # more than float rounding moves a value
def bounded(rng, x, dtype, limit): return () if max(map(abs, flat(x))) <= 5 else None
def truncated(rng, x, dtype, limit):  # float -> int: no value near an integer, where truncation jumps
  m = margin(x)
  return () if all(abs(v) < 1 - m or abs(v - round(v)) > m for v in flat(x)) else None
def compared(rng, x, dtype, limit):
  other, = any_dtype(rng, x, dtype, limit)
  gaps = ref_ew(lambda a, b: abs(a - b), x, ref_value(other))
  return (other,) if dtype != dtypes.float32 or min(flat(gaps)) > margin(x) else None
def masked(rng, x, dtype, limit):  # cond.where(x, y), y maybe a Python scalar
  cond = operand(rng, shape_of(x), dtypes.bool, limit, scalar_ok=False)
  return cond, operand(rng, broadcast_shape(shape_of(x), cond.shape), dtype, limit)
def selected(rng, x, dtype, limit):  # x.where(a, b) for a bool x: the branches choose the result's dtype, as above
  out = rng.choice(INTS + F32)
  a = operand(rng, shape_of(x), out, limit, scalar_ok=False)
  b = operand(rng, broadcast_shape(shape_of(x), a.shape), out, limit)
  return (a, b) if rng.random() < 0.5 else (b, a)
def reduced(rng, x, dtype, limit):  # every axis, or one (maybe negative); keepdim or not
  n = len(shape_of(x))
  return None if rng.random() < 0.2 else rng.randrange(-n, n), rng.random() < 0.5
def negative(rng, x, dtype, limit): return (-abs(scalar(rng, dtype)) or -1,)  # a constant below 0
def axis(rng, x, dtype, limit): return (rng.randrange(-len(shape_of(x)), len(shape_of(x))),)
def axes(rng, x, dtype, limit): return (tuple(a for a in range(len(shape_of(x))) if rng.random() < 0.6),)
def order(rng, x, dtype, limit): return (tuple(rng.sample(range(len(shape_of(x))), len(shape_of(x)))),)
def window(rng, x, dtype, limit):
  return (tuple((rng.randint(0, s // 3), s - rng.randint(0, s // 3)) for s in shape_of(x)),)
def factored(rng, x, dtype, limit):  # the size spread over 1 to 4 dims
  n, dims, p = len(flat(x)), [1] * rng.randint(1, 4), 2
  while n > 1:
    while n % p == 0: dims[rng.randrange(len(dims))] *= p; n //= p
    p += 1
  return (tuple(dims),)
def stretched(rng, x, dtype, limit):  # every 1 stretched, maybe a new leading dim
  shape = tuple(rng.randint(1, 5) if s == 1 else s for s in (1,) * rng.randint(0, 1) + shape_of(x))
  return (shape,) if math.prod(shape) <= limit else None
def padded(rng, x, dtype, limit):
  pads = tuple((rng.randint(0, 3), rng.randint(0, 3)) for _ in shape_of(x))
  value = scalar(rng, dtype)
  return (pads, value) if math.prod(s + b + a for s, (b, a) in zip(shape_of(x), pads)) <= limit else None
def indexed(rng, x, dtype, limit):  # per dim an index, or a non-empty slice with a step; sometimes a new dim
  key = []
  for s in shape_of(x):
    key += [None] if rng.random() < 0.1 else []
    k = slice(rng.randint(-s, s), rng.choice([None, rng.randint(-s, s)]), rng.choice([1, 2, 3, -1, -2]))
    key.append(rng.randrange(-s, s) if rng.random() < 0.2 else k if range(s)[k] else slice(None, None, k.step))
  return (tuple(key),)

# an op's reference: (nested list, dtype, *arguments) -> (nested list, dtype)

def ew(fn, out=None):
  """Operands (broadcast) taken to the dtype they meet in, then fn on each element, held as the result's dtype."""
  def ref(x, d, *args):
    common = promoted(d, *args)
    def one(*vs): return wrap(out or common, fn(*[wrap(common, v) for v in vs]))  # ints wrap, as the machine's do
    return ref_ew(one, x, *map(ref_value, args)), out or common
  return ref
def ref_where(cond, a, b, d):  # a Python scalar branch takes dtype d, the other branch's
  d = promoted(d, a, b)
  return ref_ew(lambda c, u, v: wrap(d, u if c else v), ref_value(cond), ref_value(a), ref_value(b)), d
def reduction(fn, out=lambda d: d):
  return lambda x, d, axis, keepdim: (ref_ew(lambda v: wrap(out(d), v), ref_reduce(fn, x, axis, keepdim)), out(d))
def view(fn): return lambda x, d, *args: (fn(x, *args), d)
def ref_flip(x, axes):
  return ref_getitem(x, tuple(slice(None, None, -1 if a in axes else 1) for a in range(len(shape_of(x)))))

@dataclasses.dataclass(frozen=True)
class RandomOp:
  applies: object  # (shape, dtype) -> bool
  draw: object
  tiny: object  # (tensor, *arguments) -> tensor
  ref: object
def on(kinds, ndim=0): return lambda shape, dtype: dtype in kinds and len(shape) >= ndim

RANDOM_OPS = {  # name: when it applies, how it draws its arguments, what tiny runs, the reference
  "neg": RandomOp(on(NUMBERS), nothing, operator.neg, ew(operator.neg)),
  "relu": RandomOp(on(NUMBERS), nothing, Tensor.relu, ew(lambda v: max(v, 0))),
  "abs": RandomOp(on(NUMBERS), nothing, Tensor.abs, ew(abs)),
  "exp": RandomOp(on(F32), bounded, Tensor.exp, ew(math.exp)),
  "sqrt(abs+1)": RandomOp(on(F32), nothing, lambda t: (t.abs() + 1).sqrt(), ew(lambda v: math.sqrt(f32(abs(v) + 1)))),
  "1/(abs+0.5)": RandomOp(on(F32), nothing, lambda t: 1 / (t.abs() + 0.5), ew(lambda v: 1 / f32(abs(v) + 0.5))),
  **{name: RandomOp(on(kinds), any_dtype, fn, ew(ref)) for name, kinds, fn, ref in [  # bools: + is or, * is and
     ("+", ALL, operator.add, operator.add), ("-", NUMBERS, operator.sub, operator.sub),
     ("*", ALL, operator.mul, operator.mul), ("maximum", ALL, Tensor.maximum, max),
     ("minimum", ALL, Tensor.minimum, min)]},
  **{f"c {name} x": RandomOp(on(kinds), negative, lambda t, c, fn=fn: fn(c, t), ew(lambda v, c, ref=ref: ref(c, v)))
     for name, kinds, fn, ref in [("-", SIGNED, operator.sub, operator.sub), ("*", SIGNED, operator.mul, operator.mul),
                                  ("//", SIGNED[1:], operator.floordiv, lambda c, v: c // v if v else 0),
                                  ("%", SIGNED[1:], operator.mod, lambda c, v: c % v if v else 0)]},
  **{name: RandomOp(on(NUMBERS), compared, fn, ew(fn, dtypes.bool))
     for name, fn in [("<", operator.lt), (">", operator.gt), ("==", operator.eq)]},
  **{name: RandomOp(on(INTS + BOOL), same_dtype, fn, ew(fn))
     for name, fn in [("&", operator.and_), ("|", operator.or_), ("^", operator.xor)]},
  **{name: RandomOp(on(INTS), same_dtype, fn, ew(lambda a, b, fn=fn: fn(a, b) if b else 0))  # by 0: 0, as numpy's
     for name, fn in [("//", operator.floordiv), ("%", operator.mod)]},
  "not": RandomOp(on(BOOL), nothing, Tensor.logical_not, ew(operator.not_)),
  "cond.where(x, y)": RandomOp(on(NUMBERS), masked, lambda t, c, y: c.where(t, y),
                               lambda x, d, c, y: ref_where(c, x, y, d)),
  "x.where(a, b)": RandomOp(on(BOOL), selected, Tensor.where,
                            lambda x, d, a, b: ref_where(x, a, b, (a if isinstance(a, Input) else b).dtype)),
  "x - x.max(axis, keepdim=True)": RandomOp(on(NUMBERS, ndim=1), axis, lambda t, a: t - t.max(a, keepdim=True),
                                            lambda x, d, a: ew(operator.sub)(x, d, ref_reduce(max, x, a, True))),
  "x * x.flip(axes)": RandomOp(on(NUMBERS, ndim=1), axes, lambda t, a: t * t.flip(a),
                               lambda x, d, a: ew(operator.mul)(x, d, ref_flip(x, a))),
  "int": RandomOp(on(F32), truncated, Tensor.int, ew(int, dtypes.int32)),
  "float": RandomOp(on(INTS + BOOL), nothing, Tensor.float, ew(float, dtypes.float32)),
  "bool": RandomOp(on(INTS), nothing, Tensor.bool, ew(bool, dtypes.bool)),
  **{f"cast {d.name}": RandomOp(on(INTS + BOOL), nothing, lambda t, d=d: t.cast(d), ew(int, d)) for d in INTS},
  "sum": RandomOp(on(ALL, ndim=1), reduced, Tensor.sum,  # ints add up in int64, as in numpy and torch
                  reduction(math.fsum, lambda d: d if d == dtypes.float32 else dtypes.int64)),
  "max": RandomOp(on(ALL, ndim=1), reduced, Tensor.max, reduction(max)),
  "min": RandomOp(on(ALL, ndim=1), reduced, Tensor.min, reduction(min)),
  "mean": RandomOp(on(ALL, ndim=1), reduced, Tensor.mean, reduction(mean, lambda d: dtypes.float32)),
  "reshape": RandomOp(on(ALL), factored, Tensor.reshape, view(ref_reshape)),
  "permute": RandomOp(on(ALL, ndim=2), order, Tensor.permute, view(ref_permute)),
  "flip": RandomOp(on(ALL, ndim=1), axes, Tensor.flip, view(ref_flip)),
  "pad": RandomOp(on(ALL, ndim=1), padded, lambda t, pads, value: t.pad(pads, value=value), view(ref_pad)),
  "shrink": RandomOp(on(ALL, ndim=1), window, Tensor.shrink,
                     view(lambda x, bounds: ref_getitem(x, tuple(slice(*b) for b in bounds)))),
  "expand": RandomOp(on(ALL), stretched, Tensor.expand,
                     view(lambda x, shape: build(shape, lambda idx: at(x, source_index(idx, shape_of(x)))))),
  "getitem": RandomOp(on(ALL, ndim=1), indexed, operator.getitem, view(ref_getitem)),
  "contiguous": RandomOp(on(ALL), nothing, Tensor.contiguous, view(lambda x: x)),
  "realize": RandomOp(on(ALL), nothing, Tensor.realize, view(lambda x: x)),
}

@dataclasses.dataclass
class RandomProgram:
  start: Input
  steps: list  # (op name, its arguments)
  want: object  # the reference's result
  dtype: tiny.DType
  scale: float  # the biggest float on the way: float sums round relative to it
  def __str__(self):
    return "\n".join([f"x = {self.start}"] + [f"{name}({', '.join(map(repr, args))})" for name, args in self.steps])

def random_program(seed: int, limit: int) -> RandomProgram:
  rng = random.Random(seed)
  dtype = rng.choice(F32 * 5 + INTS + BOOL)
  start = Input(random_shape(rng, limit), dtype, seed)
  x, steps, scale, length = start.values(), [], 1.0, rng.randint(3, 12)
  while len(steps) < length:
    name = rng.choice([name for name, op in RANDOM_OPS.items() if op.applies(shape_of(x), dtype)])
    if (args := RANDOM_OPS[name].draw(rng, x, dtype, limit)) is None: continue
    x, dtype = RANDOM_OPS[name].ref(x, dtype, *args)
    steps.append((name, args))
    scale = max(scale, *map(abs, flat(x))) if dtype == dtypes.float32 else scale
  return RandomProgram(start, steps, x, dtype, scale)

RANDOM_RUNS = [("CPU", seed, 3000) for seed in range(40)] + [("PYTHON", seed, 200) for seed in range(100, 115)]

REDUCES = {"sum", "max", "min", "mean", "x - x.max(axis, keepdim=True)"}

def check_program(program: RandomProgram, t: Tensor):
  """Floats are close; a zero has the reference's sign too, unless a reduce made it (which of -0.0 and 0.0 a max
  keeps, or a sum's first term, depends on the order it runs in)."""
  assert t.dtype == program.dtype
  got = t.tolist()
  if program.dtype != dtypes.float32: assert got == program.want; return
  assert_close(got, program.want, rtol=1e-4, atol=1e-4 * program.scale)
  if not any(name in REDUCES for name, _ in program.steps):
    assert [math.copysign(1, g) for g, w in zip(flat(got), flat(program.want)) if g == w == 0] == \
           [math.copysign(1, w) for g, w in zip(flat(got), flat(program.want)) if g == w == 0], "signs of zeros"

@pytest.mark.parametrize("device, seed, limit", RANDOM_RUNS, ids=[f"{d}-{s}" for d, s, _ in RANDOM_RUNS])
def test_random_program_matches_reference(device, seed, limit, monkeypatch):
  monkeypatch.setenv("NOOPT", str(seed % 2))  # odd seeds lower without tiny's optimizations
  program = random_program(seed, limit)
  print(f"seed {seed} on {device}, at most {limit} elements:\n{program}")
  def tensor(arg): return Tensor(arg.values(), arg.dtype, device) if isinstance(arg, Input) else arg
  t = tensor(program.start)
  for name, args in program.steps: t = RANDOM_OPS[name].tiny(t, *map(tensor, args))
  check_program(program, t)

PIECES_RUNS = [("CPU", seed, 3000) for seed in range(200, 212)] + [("PYTHON", seed, 150) for seed in range(300, 304)]

@pytest.mark.parametrize("device, seed, limit", PIECES_RUNS, ids=[f"{d}-{s}" for d, s, _ in PIECES_RUNS])
def test_random_program_realized_in_pieces_then_replayed(device, seed, limit, monkeypatch):
  """A random program with some of its steps realized on the way, alone or several together, run twice (the second
  time on plans made the first), then as a TinyJit function on new inputs: each result is the reference's."""
  monkeypatch.setenv("NOOPT", str(seed % 2))
  program, rng = random_program(seed, limit), random.Random(seed)
  print(f"seed {seed} on {device}, at most {limit} elements:\n{program}")
  def tensor(arg): return Tensor(arg.values(), arg.dtype, device) if isinstance(arg, Input) else arg
  def steps(t, realize:bool):
    kept = []
    for name, args in program.steps:
      t = RANDOM_OPS[name].tiny(t, *map(tensor, args))
      if realize and (draw := rng.random()) < 0.25: t.realize()
      elif realize and draw < 0.5: kept.append(t)
    return Tensor.realize(t, *kept)
  for _ in range(2): check_program(program, steps(tensor(program.start), realize=True))
  jit = tiny.TinyJit(lambda x: steps(x, realize=False))
  for _ in range(3): check_program(program, jit(tensor(program.start).realize()))

JIT_VALUES = [True, False, 0, 1, -1, 3, 0.0, -0.0, 1.0, -2.5, math.nan]  # equal as keys, some of them, but not as data
JIT_RUNS = [("CPU", seed) for seed in range(400, 410)] + [("PYTHON", seed) for seed in range(500, 503)]

@pytest.mark.parametrize("device, seed", JIT_RUNS, ids=[f"{d}-{s}" for d, s in JIT_RUNS])
def test_random_jit_replays_match_eager(device, seed):
  """A random program with a Python value joined in (+, * or maximum) at a random step and at the end, as a TinyJit
  function, called on inputs and values drawn from small pools (so signatures repeat, and replay): each call's result
  is the eager call's, dtype and bits (nan, the sign of zero), though the eager call on the same tensor computed its
  nodes first. Every result keeps its values after later calls."""
  rng = random.Random(seed)
  program = random_program(seed, 200)
  at, join = rng.randrange(len(program.steps)), rng.choice([operator.add, operator.mul, Tensor.maximum])
  def tensor(arg): return Tensor(arg.values(), arg.dtype, device) if isinstance(arg, Input) else arg
  def fn(x, s):
    for i, (name, args) in enumerate(program.steps):
      x = RANDOM_OPS[name].tiny(x, *map(tensor, args))
      if i == at: x = join(x, s).cast(x.dtype)  # (the steps after apply to x's dtype)
    return join(x, s)
  print(f"seed {seed} on {device}, {join.__name__} after step {at}:\n{program}")
  inputs = [Input(program.start.shape, program.start.dtype, seed + k).values() for k in range(3)]
  values, jit, results = rng.sample(JIT_VALUES, 4), tiny.TinyJit(fn), []
  for _ in range(12):
    x, s = Tensor(rng.choice(inputs), program.start.dtype, device).realize(), rng.choice(values)
    want = fn(x, s).realize()
    got = jit(x, s)
    assert (got.dtype, repr(got.tolist())) == (want.dtype, repr(want.tolist())), f"s = {s!r}"
    results.append((got, repr(want.tolist())))
  assert [repr(got.tolist()) for got, _ in results] == [want for _, want in results]

# ------------------------------------------------------------------------------------------------------------------
# errors: raised by the op that is wrong, before anything is realized

def test_broadcast_mismatch_names_both_shapes():
  with pytest.raises(ValueError) as e: Tensor.ones(3, 7) + Tensor.ones(7, 3)
  assert "(3, 7)" in str(e.value) and "(7, 3)" in str(e.value)

def test_impossible_reshape_names_both_shapes():
  with pytest.raises(ValueError) as e: Tensor.ones(3, 7).reshape(4, 5)
  assert "(3, 7)" in str(e.value) and "(4, 5)" in str(e.value)

def test_axis_out_of_range_is_index_error():
  t = Tensor.ones(3, 7)
  for bad in (lambda: t.sum(axis=5), lambda: t.max(axis=-3), lambda: t.permute(0, 2)):
    with pytest.raises(IndexError): bad()

def test_permute_that_is_not_a_permutation_is_value_error():
  with pytest.raises(ValueError): Tensor.ones(3, 7).permute(0, 0)

def test_index_out_of_range_is_index_error():
  t = Tensor.ones(3, 7)
  for bad in (lambda: t[3], lambda: t[-4], lambda: t[0, 7]):
    with pytest.raises(IndexError): bad()

def test_matmul_mismatch_names_both_shapes():
  with pytest.raises(ValueError) as e: Tensor.ones(3, 7) @ Tensor.ones(5, 3)
  assert "(3, 7)" in str(e.value) and "(5, 3)" in str(e.value)

def test_bad_dtypes_are_type_errors_naming_them():
  with pytest.raises(TypeError, match="float"): Tensor([1.5, 2.0]) & Tensor([True, False])
  with pytest.raises(TypeError, match="notadtype"): Tensor([1, 2]).cast("notadtype")
  with pytest.raises(AttributeError, match="''"): Tensor([1.0, 2.0]).sum(dtype="")  # (tinygrad's error type too)
  with pytest.raises(TypeError, match="'w'"): Tensor(array.array("u", "ab"))  # (tiny has no character dtype)
  assert Tensor(array.array("d", [0.1, 2.0])).dtype == dtypes.float64
  with pytest.raises(TypeError, match="str"): Tensor([1.0]) + "1"

def test_missing_c_compiler_is_named(tmp_path):
  r = run_python("""
    from tiny import Tensor
    try: (Tensor([1.0, 2.0, 3.0]) * 5 + 3).realize()
    except RuntimeError as e: print("RuntimeError:", e)
  """, tmp_path, CC="/nonexistent/cc", DEVICE="CPU")
  assert "RuntimeError:" in r.stdout and "/nonexistent/cc" in r.stdout and "$CC" in r.stdout, r.stdout

# ------------------------------------------------------------------------------------------------------------------
# edges: a value keeps its meaning where a dtype, a shape or an axis would quietly change it. Each case is what
# numpy 2, torch or tinygrad do; where they differ, the one that can't give a wrong number.

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_where_with_a_scalar_branch_keeps_the_other_branch_dtype(device):
  c = rand_ints((3, 7), 110, -128, 127)
  t = Tensor(c, dtype=dtypes.int8, device=device)
  got = (t > 0).where(t, 3)
  assert got.dtype == dtypes.int8 and got.tolist() == ref_ew(lambda v: v if v > 0 else 3, c)
  got = (t > 0).where(-7, t)
  assert got.dtype == dtypes.int8 and got.tolist() == ref_ew(lambda v: -7 if v > 0 else v, c)
  u = Tensor([3000000000, 0, 7], dtype=dtypes.uint32, device=device)
  assert (u > 0).where(u, 3).dtype == dtypes.uint32 and (u > 0).where(u, 3).tolist() == [3000000000, 3, 7]
  got = (t > 0).where(t, 1.5)
  assert got.dtype == dtypes.float32 and got.tolist() == ref_ew(lambda v: float(v) if v > 0 else 1.5, c)

@pytest.mark.parametrize("x, y, dtype", [(1, 2.5, dtypes.float32), (1, 2, dtypes.int32), (True, False, dtypes.bool),
                                         (True, 2, dtypes.int32), (2**40, 1, dtypes.int64)])
def test_where_with_two_scalar_branches_takes_their_own_dtypes(x, y, dtype):
  c = rand_ints((7,), 111, -1, 1)
  got = (Tensor(c) > 0).where(x, y)
  assert got.dtype == dtype and got.tolist() == [x if v > 0 else y for v in c]

@pytest.mark.parametrize("dtype, lo, hi", [(dtypes.int8, -128, 127), (dtypes.uint8, 0, 255)])
def test_pad_with_a_value_keeps_a_narrow_int_dtype(dtype, lo, hi):
  x, pads = rand_ints((3, 7), 112, lo, hi), ((1, 2), (0, 3))
  got = Tensor(x, dtype=dtype).pad(pads, value=3)
  assert got.dtype == dtype and got.tolist() == ref_pad(x, pads, 3)

def test_max_and_min_of_many_int8_stay_int8():  # past 2**15 elements they pad to a split with the identity
  x = rand_ints((40009,), 113, -128, 127)
  t = Tensor(x, dtype=dtypes.int8)
  assert t.max().dtype == t.min().dtype == dtypes.int8 and (t.max().item(), t.min().item()) == (max(x), min(x))

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_python_ints_past_int32_make_int64_tensors(device):
  assert Tensor([2**31, 1], device=device).dtype == dtypes.int64
  assert Tensor([2**31, -2**40], device=device).tolist() == [2**31, -2**40]
  assert Tensor(2**40, device=device).dtype == dtypes.int64 and Tensor(2**40, device=device).item() == 2**40

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_python_int_an_int_tensor_cant_hold_wraps_into_its_dtype(device):  # (tinygrad's and torch's rule)
  def wrapped(v, bits, signed):
    v %= 2**bits
    return v - 2**bits if signed and v >= 2**(bits - 1) else v
  for got, dtype, want in [(Tensor([1, -3], device=device) * 2**40, dtypes.int32, [0, 0]),
                           (2**31 + 5 - Tensor([1, -3], device=device), dtypes.int32, [wrapped(2**31 + 4, 32, True),
                                                                                      wrapped(2**31 + 8, 32, True)]),
                           (Tensor([100, -3], dtype=dtypes.int8, device=device) * 300, dtypes.int8,
                            [wrapped(30000, 8, True), wrapped(-900, 8, True)]),
                           (Tensor([5, 0], dtype=dtypes.uint32, device=device) + -1, dtypes.uint32, [4, 2**32 - 1]),
                           (Tensor([7, 9], dtype=dtypes.uint8, device=device) & 2**70 + 3, dtypes.uint8, [3, 1])]:
    assert got.dtype == dtype and got.tolist() == want

OVERFLOWS = {  # name: (what the user wrote, the value and dtype the message names)
  "scalar": (lambda: Tensor(2**40, dtype="int32"), "1099511627776", "int"),
  "list": (lambda: Tensor([1, 300], dtype="uint8"), "300", "uchar"),
  "negative unsigned": (lambda: Tensor([-1], dtype=dtypes.uint32), "-1", "uint"),
  "full": (lambda: Tensor.full((2,), 2**40, dtype="int32"), "1099511627776", "int"),
  "past uint64": (lambda: Tensor(2**64), "18446744073709551616", "ulong"),  # (2**63 is a uint64, as in numpy)
  "list past int64": (lambda: Tensor([1, -2**63 - 1]), "-9223372036854775809", "long"),
  "arange": (lambda: Tensor.arange(250, 260, dtype="uint8"), "259", "uchar"),
}

@pytest.mark.parametrize("name", OVERFLOWS)
def test_ints_that_dont_fit_raise_overflow_error_naming_value_and_dtype(name):
  make, value, dtype = OVERFLOWS[name]
  with pytest.raises(OverflowError) as e: make()
  assert value in str(e.value) and f"dtypes.{dtype} " in str(e.value)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dtype, lo, hi", [(dtypes.uint8, 0, 255), (dtypes.uint32, 0, 2**32 - 1),
                                           (dtypes.int8, -128, 127), (dtypes.int32, -2**31, 2**31 - 1)])
def test_invert_flips_every_bit_of_any_int(device, dtype, lo, hi):
  x = rand_ints((3, 7), 114, lo, hi)
  got = ~Tensor(x, dtype=dtype, device=device)
  assert got.dtype == dtype and got.tolist() == ref_ew(lambda v: hi - v if lo == 0 else -v - 1, x)

def test_numpy_scalars_in_a_list_keep_their_kind():
  np = pytest.importorskip("numpy")
  cases = [([np.float32(1.5), np.float32(-2.25)], dtypes.float32, [1.5, -2.25]),
           ([np.float64(0.5), 2], dtypes.float32, [0.5, 2.0]), ([np.float16(1.5)], dtypes.float16, [1.5]),
           ([np.int64(3), np.int32(-4)], dtypes.int32, [3, -4]), ([np.int64(2**40), 1], dtypes.int64, [2**40, 1]),
           ([np.uint8(200), np.int8(-1)], dtypes.int32, [200, -1]), ([np.True_, np.False_], dtypes.bool, [True, False]),
           ([[np.float32(0.25)], [1]], dtypes.float32, [[0.25], [1.0]])]
  for data, dtype, want in cases:
    t = Tensor(data)
    assert t.dtype == dtype and t.tolist() == want, data

@pytest.mark.parametrize("data, named", [(["a"], "'a'"), ([None], "None"), ([[1], ["x"]], "'x'"), ([1.5, "2"], "'2'")])
def test_data_that_is_not_numbers_is_refused_naming_it(data, named):
  for dtype in (None, dtypes.float32, dtypes.bool):  # a dtype given doesn't make a string a number
    with pytest.raises(TypeError) as e: Tensor(data, dtype=dtype)
    assert named in str(e.value)

def test_ragged_data_is_a_shape_error():
  with pytest.raises(tiny.ShapeError, match="ragged"): Tensor([[1, 2], [3, [4]]])

def test_bool_subtraction_and_negation_are_type_errors():  # numpy and torch refuse both; -True is -1 in Python
  p, q = Tensor([True, False, True]), Tensor([True, True, False])
  for bad in (lambda: p - q, lambda: -p, lambda: True - q, lambda: p.neg(), lambda: p.sub(False)):
    with pytest.raises(TypeError, match="bool"): bad()
  assert (p - 1).dtype == dtypes.int32 and (p - 1).tolist() == [0, -1, 0]  # with an int it is int arithmetic
  assert (~p).tolist() == [False, True, False] and (p ^ q).tolist() == [False, True, True]

def test_truth_value_of_a_tensor_is_its_only_element():
  assert bool(Tensor([1.0])) is True and bool(Tensor([[0]])) is False and bool(Tensor(2.5)) is True
  assert not (Tensor([1.0, 2.0]).sum() - 3)  # computed first: a graph, not a buffer
  assert Tensor([1.0]) not in [Tensor([2.0]), Tensor([3.0])] and Tensor([2.0]) in [Tensor([1.0]), Tensor([2.0])]
  for bad in (Tensor([1.0, 2.0]), Tensor.ones(3, 7) > 0, Tensor.zeros(0)):
    for error in (ValueError, RuntimeError):  # numpy raises the first, torch the second
      with pytest.raises(error, match="ambiguous"): bool(bad)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_int_sums_add_up_in_int64(device):
  x = rand_ints((7, 33), 115, -128, 127)
  for dtype in (dtypes.int8, dtypes.int32, dtypes.int64):
    got = Tensor(x, dtype=dtype, device=device).sum(axis=1)
    assert got.dtype == dtypes.int64 and got.tolist() == ref_reduce(sum, x, 1)
  u = ref_ew(lambda v: v + 128, x)
  assert Tensor(u, dtype=dtypes.uint8, device=device).sum().tolist() == sum(flat(u))
  big = Tensor([3000000000, 4000000000, 5], dtype=dtypes.uint32, device=device).sum()
  assert big.dtype == dtypes.int64 and big.item() == 7000000005
  assert (Tensor(x, device=device) > 0).sum().dtype == dtypes.int64
  assert Tensor(x, dtype=dtypes.int8, device=device).mean().dtype == dtypes.float32

def test_int32_sum_past_int32_is_exact():
  assert Tensor.full((100000,), 100000, dtype="int32").sum().item() == 10000000000

BAD_SIZES = {"zeros(-2)": lambda: Tensor.zeros(-2), "ones(2.5)": lambda: Tensor.ones(2.5),
             "full((-1, 3))": lambda: Tensor.full((-1, 3), 1.0), "empty(-1)": lambda: Tensor.empty(-1),
             "rand(-3)": lambda: Tensor.rand(-3), "randn(3, -1)": lambda: Tensor.randn(3, -1),
             "expand(-2, 3)": lambda: Tensor.ones(1, 3).expand(-2, 3),
             "reshape(2.5, 2)": lambda: Tensor.ones(5).reshape(2.5, 2),
             "reshape(1.6, 2.5)": lambda: Tensor.ones(4).reshape(1.6, 2.5),  # would never fold into strides
             "reshape(-2, -3)": lambda: Tensor.ones(6).reshape(-2, -3),
             "pad that crops past the size": lambda: Tensor.ones(3, 7).pad(((-2, -2), (0, 0))),
             "arange(0, 1e30, 1.0)": lambda: Tensor.arange(0, 1e30, 1.0)}

@pytest.mark.parametrize("name", BAD_SIZES)
def test_negative_or_fractional_sizes_raise_value_error_at_the_op(name):
  with pytest.raises(ValueError): BAD_SIZES[name]()

def test_a_padding_or_stride_that_isnt_ints_raises_type_error_naming_it():  # (torch's padding="same": not tinygrad's)
  for call in (lambda: Tensor.ones(1, 1, 5, 5).conv2d(Tensor.ones(1, 1, 3, 3), padding="same"),
               lambda: Tensor.ones(1, 1, 5, 5).max_pool2d(stride=(1.5, 2))):
    with pytest.raises(TypeError, match="an int for each dim"): call()

def test_expand_keeps_a_dim_given_as_minus_one():
  x = rand_list((3, 1), 116)
  assert Tensor(x).expand(-1, 5).tolist() == ref_ew(lambda v, _: v, x, [[0.0] * 5])

@pytest.mark.parametrize("make", [lambda: Tensor.ones(2**40, 2**40), lambda: Tensor.empty(2**32, 2**32),
                                  lambda: Tensor.rand(2**62, 2, 2), lambda: Tensor.ones(3, 1).expand(3, 2**62),
                                  lambda: Tensor.ones(2**32).reshape(2**32, 1).expand(2**32, 2**32)])
def test_shapes_no_index_can_count_raise_naming_the_shape(make):
  with pytest.raises(ValueError, match="elements"): make()

def test_a_shape_of_int64_many_elements_is_allowed():
  assert Tensor.ones(2**31, 2**32 - 1).shape == (2**31, 2**32 - 1)

@pytest.mark.parametrize("op", [lambda t: t.sum((0, 0)), lambda t: t.sum((2, -1)), lambda t: t.flip((0, 0)),
                                lambda t: t.max((0, 0)), lambda t: t.min((2, -1)), lambda t: t.mean((0, -3))])
def test_an_axis_named_twice_is_a_shape_error(op):
  with pytest.raises(tiny.ShapeError): op(Tensor.ones(3, 7, 5))

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_zero_d_tensors_take_axis_0_and_minus_1(device):
  t = Tensor(3.0, device=device)
  for got, want in [(t.sum(0), 3.0), (t.sum(-1), 3.0), (t.max(0), 3.0), (t.min(-1), 3.0), (t.mean(0), 3.0),
                    (t.softmax(), 1.0), (t.log_softmax(0), 0.0), (t.sum(0, keepdim=True), 3.0), (t.flip(0), 3.0)]:
    assert got.shape == () and got.item() == want
  with pytest.raises(IndexError): t.sum(1)

@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 0, 3), (3, 5, 0), (0,), (1, 0, 1)])
def test_tolist_of_a_shape_with_a_zero_nests_empty_lists(shape):
  assert Tensor.ones(*shape).tolist() == build(shape, lambda _: 1.0)


SHAPE_ERRORS = {
  "reshape with two -1": lambda: Tensor.ones(4).reshape(-1, -1, 2),
  "reshape to another size": lambda: Tensor.ones(3, 7).reshape(4, 5),
  "permute of too few dims": lambda: Tensor.ones(2, 3, 5, 7).permute(0, 2),
  "permute with a repeat": lambda: Tensor.ones(3, 7).permute(1, 1),
  "expand of a size that isn't 1": lambda: Tensor.ones(3, 7).expand(5, 7),
  "flip with a repeat": lambda: Tensor.ones(3, 7).flip((1, -1)),
  "sum with a repeat": lambda: Tensor.ones(3, 7).sum((0, -2)),
  "matmul": lambda: Tensor.ones(3, 7) @ Tensor.ones(5, 3),
  "dot of a 0-d tensor": lambda: Tensor(2.0).dot(Tensor.ones(3)),
  "cat": lambda: Tensor.ones(3, 7).cat(Tensor.ones(3, 5), dim=0),
  "stack": lambda: Tensor.stack([Tensor.ones(3), Tensor.ones(5)]),
  "broadcast": lambda: Tensor.ones(3, 7) + Tensor.ones(7, 3),
  "shrink": lambda: Tensor.ones(3, 7).shrink(((0, 4), None)),
  "pad of too many dims": lambda: Tensor.ones(3, 7).pad(((1, 1),) * 3),
}

@pytest.mark.parametrize("name", SHAPE_ERRORS)
def test_shape_errors_are_value_errors_and_runtime_errors(name):  # numpy raises the first; torch, tinygrad the second
  with pytest.raises(tiny.ShapeError) as e: SHAPE_ERRORS[name]()
  assert isinstance(e.value, ValueError) and isinstance(e.value, RuntimeError)

@pytest.mark.parametrize("args, dtype", [((2**31 + 10,), dtypes.int64), ((2**31 - 1,), dtypes.int32),
                                         ((-2**31 - 1, 0), dtypes.int64), ((5, -2**31 - 2, -2**31), dtypes.int32),
                                         ((-5, -2**31 - 6, -2**30), dtypes.int64), ((2**31 - 5, 2**31), dtypes.int32),
                                         ((0, 2**40, 2**39), dtypes.int64)])
def test_arange_past_int32_is_int64(args, dtype):
  assert Tensor.arange(*args).dtype == dtype

def test_arange_of_values_past_int32():
  for args in [(2**31, 2**31 + 5), (0, 2**40, 2**39), (-5, -2**31 - 6, -2**30), (5, -2**31 - 2, -2**31)]:
    assert Tensor.arange(*args).tolist() == list(range(*args))

@pytest.mark.parametrize("dtype, lo, hi", [(dtypes.bool, False, True), (dtypes.int8, -128, 127), (dtypes.uint8, 0, 255),
                                           (dtypes.int32, -2**31, 2**31 - 1), (dtypes.uint32, 0, 2**32 - 1),
                                           (dtypes.int64, -2**63, 2**63 - 1), (dtypes.float16, -math.inf, math.inf),
                                           (dtypes.float32, -math.inf, math.inf)])
def test_dtypes_min_and_max(dtype, lo, hi):
  assert (dtypes.min(dtype), dtypes.max(dtype)) == (lo, hi) and type(dtypes.min(dtype)) is type(lo)

def test_dtypes_finfo_and_bitsize():  # the mantissa's bits: the last k where 1 + 2^-k still differs from 1
  import struct
  for d, fmt in [(dtypes.half, "e"), (dtypes.float32, "f"), (dtypes.float64, "d")]:
    bits = max(k for k in range(1, 60) if struct.unpack(fmt, struct.pack(fmt, 1 + 2**-k))[0] != 1)
    assert dtypes.finfo(d) == (d.bitsize - 1 - bits, bits) and d.bitsize == 8 * struct.calcsize(fmt)
  assert dtypes.finfo(dtypes.bfloat16) == (8, 7)  # (float32's exponent, in 16 bits)
  with pytest.raises(ValueError, match="float"): dtypes.finfo(dtypes.int32)

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack_takes_a_list_a_tuple_or_tensors(dim):
  a, b, c = rand_list((3, 7), 117), rand_list((3, 7), 118), rand_list((3, 7), 119)
  want = ref_cat([ref_unsqueeze(x, dim % 3) for x in (a, b, c)], dim % 3)
  ts = [Tensor(x) for x in (a, b, c)]
  assert Tensor.stack(ts, dim=dim).tolist() == Tensor.stack(tuple(ts), dim=dim).tolist() == \
    Tensor.stack(*ts, dim=dim).tolist() == want

PAD_SOURCE = {  # mode: the element of a dim of size s that position i shows, i counted from the first original one
  "reflect": lambda i, s: -i if i < 0 else 2 * (s - 1) - i if i >= s else i,
  "replicate": lambda i, s: min(max(i, 0), s - 1),
  "circular": lambda i, s: i % s}

def ref_pad_mode(x, pads, mode, value=0.0):
  if mode == "constant": return ref_pad(x, pads, value)
  if mode == "circular":  # torch's circular pad crops first, then wraps what is left
    cut = [(max(-b, 0), max(-a, 0)) for b, a in pads]
    x = build(tuple(s - c - d for s, (c, d) in zip(shape_of(x), cut)),
              lambda idx: at(x, [i + c for i, (c, _) in zip(idx, cut)]))
    pads = [(max(b, 0), max(a, 0)) for b, a in pads]
  shape = shape_of(x)
  def cell(idx): return at(x, [PAD_SOURCE[mode](i - b, s) for i, (b, _), s in zip(idx, pads, shape)])
  return build(tuple(b + s + a for s, (b, a) in zip(shape, pads)), cell)

def flat_pads(pads): return tuple(v for pair in reversed(pads) for v in pair)  # torch's order: the last dim first

PAD_CASES = [((3, 7), ((2, 1), (3, 6))), ((5, 3, 9), ((0, 4), (2, 2), (8, 1))), ((1003,), ((5, 2),)),
             ((3, 7), ((-1, 2), (3, -4))), ((5, 3, 9), ((1, -2), (0, 0), (-3, 5))), ((7, 5), ((0, 0), (4, 3)))]

@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pads", PAD_CASES)
@pytest.mark.parametrize("flat", [False, True], ids=["pairs", "flat"])
def test_pad_modes_match_reference(mode, shape, pads, flat):
  x = rand_list(shape, 120)
  kw = {"value": -2.5} if mode == "constant" else {}
  got = Tensor(x).pad(flat_pads(pads) if flat else pads, mode=mode, **kw)
  assert got.tolist() == ref_pad_mode(x, pads, mode, -2.5)

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_of_ints_on_the_emulator(mode):
  x, pads = rand_ints((3, 7), 121), ((2, -1), (6, 3))
  got = Tensor(x, device="PYTHON").pad(flat_pads(pads)[:2], mode=mode)  # flat, short: the last dim only
  assert got.dtype == dtypes.int32 and got.tolist() == ref_pad_mode(x, ((0, 0), (6, 3)), mode)
  got = Tensor(x, device="PYTHON").pad(pads, mode=mode)
  assert got.tolist() == ref_pad_mode(x, pads, mode)

def test_pad_circular_wraps_at_most_once():
  x = rand_list((3, 7), 122)
  assert Tensor(x).pad(((3, 3), (7, 0)), mode="circular").tolist() == ref_pad_mode(x, ((3, 3), (7, 0)), "circular")
  with pytest.raises(ValueError): Tensor(x).pad(((4, 0), (0, 0)), mode="circular")

@pytest.mark.parametrize("bad", [lambda t: t.pad(((3, 0), (0, 0)), mode="reflect"),  # reflect: less than the size
                                 lambda t: t.pad((0, 7), mode="reflect"), lambda t: t.pad((0, 8), mode="circular"),
                                 lambda t: t.shrink(((0, 0), None)).pad(((1, 0), (0, 0)), mode="replicate"),
                                 lambda t: t.pad((1, 1), "reflect", 1.0)])
def test_pad_modes_refuse_what_they_cant_do(bad):
  with pytest.raises(ValueError): bad(Tensor.ones(3, 7))
  with pytest.raises(NotImplementedError, match="'wrap'"): Tensor.ones(3, 7).pad((1, 1), mode="wrap")  # as tinygrad


@pytest.mark.parametrize("padding", [(0.5, 1), ((0, 1), (1.5, 0)), ((0, 1), (1,)), (1, "2")])
def test_pad_sizes_must_be_whole_numbers(padding):
  with pytest.raises(ValueError, match="padding"): Tensor.ones(2, 3).pad(padding)
# ------------------------------------------------------------------------------------------------------------------
# DEBUG output, NOOPT, and the on-disk kernel cache (each in a fresh process, since they read the environment)

DEBUG_SCRIPT = """
  import tiny
  from tiny import Tensor
  t = Tensor([1.0, 2.0, 3.0, 4.0, 5.0]).realize() * 3 - 1
  print("BUILT", tiny.render(t)[0].name, flush=True)
  print("VALUES", t.tolist(), flush=True)
"""

def test_nothing_runs_until_realize(tmp_path):
  r = run_python(DEBUG_SCRIPT, tmp_path, DEBUG="2")
  before, after = r.stdout.split("BUILT ", 1)
  name = after.split()[0]
  assert not any(name in line for line in before.splitlines()) and "GB/s" in after, r.stdout

def test_debug2_prints_one_line_per_kernel_with_bandwidth(tmp_path):
  r = run_python(DEBUG_SCRIPT, tmp_path, DEBUG="2")
  name = r.stdout.split("BUILT ", 1)[1].split()[0]
  assert name.startswith("E_") and "VALUES [2.0, 5.0, 8.0, 11.0, 14.0]" in r.stdout, r.stdout
  assert sum(name in line and "GB/s" in line for line in r.stdout.splitlines()) == 1, r.stdout

def test_debug4_prints_kernel_source(tmp_path):
  src_file = tmp_path / "src.txt"
  r = run_python(f"""
    import tiny
    from tiny import Tensor
    t = Tensor([1.0, 2.0, 3.0]).realize() * 7 + 2
    open({str(src_file)!r}, "w").write(tiny.render(t)[0].src)
    t.realize()
  """, tmp_path, DEBUG="4")
  longest = max(src_file.read_text().splitlines(), key=lambda line: len(line.strip())).strip()
  assert longest in r.stdout, r.stdout

def test_noopt_changes_the_kernel_but_not_the_values(tmp_path):
  script = """
    import tiny
    from tiny import Tensor
    a, b = Tensor([float(i) for i in range(32)]).realize(), Tensor([0.5] * 32).realize()
    print("NAME", tiny.render(a + b)[0].name)
    print("VALUES", (a + b).tolist(), (a.reshape(2, 16) * b.reshape(2, 16)).sum(axis=1).tolist())
  """  # 32 elements: two vectors at the CPU's widest, so NOOPT's one loop differs by name at every width
  runs = [run_python(script, tmp_path, NOOPT=noopt).stdout for noopt in ("0", "1")]
  names = [out.split("NAME ", 1)[1].split()[0] for out in runs]
  assert all(n.startswith("E_") for n in names) and names[0] != names[1], runs
  want = f"VALUES {[i + 0.5 for i in range(32)]} {[sum(range(16)) / 2, sum(range(16, 32)) / 2]}"
  assert all(want in out for out in runs), runs

def test_second_process_reuses_compiled_kernels(tmp_path):
  script = "from tiny import Tensor\nprint((Tensor([1.0, 2.0, 3.0]) * 7 + 0.25).tolist())"
  cache = tmp_path / "cache"
  def snapshot(): return {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
  first = run_python(script, tmp_path, DEVICE="CPU")
  files = snapshot()
  assert first.returncode == 0 and files, first.stdout
  second = run_python(script, tmp_path, DEVICE="CPU")
  assert second.stdout == first.stdout == "[7.25, 14.25, 21.25]\n"
  assert snapshot() == files

def test_second_process_neither_lowers_nor_compiles(tmp_path):
  script = """
    import os, sys, tiny
    from tiny import Tensor
    if os.environ["PHASE"] == "warm":  # from the disk cache: a lowered program, then its binary
      tiny.lower = tiny.CPURuntime.compile = lambda *_: sys.exit("lowered or compiled again")
    x = Tensor([[float(i - j) for j in range(37)] for i in range(5)])
    print((x.softmax(-1) @ Tensor([[0.5] * 3] * 37)).tolist())
  """
  runs = [run_python(script, tmp_path, DEVICE="CPU", PHASE=phase) for phase in ("cold", "warm")]
  assert runs[0].returncode == runs[1].returncode == 0 and runs[0].stdout == runs[1].stdout, runs[1].stdout
  row = [0.5] * 3
  assert_close(eval(runs[0].stdout), [row] * 5)

def test_a_kernels_source_does_not_depend_on_what_was_lowered_before(monkeypatch):
  x = Tensor([[float(i * 7 % 5 - j) for j in range(37)] for i in range(13)])
  w = Tensor([[float((i + j) % 3) for j in range(11)] for i in range(37)])
  asts = [item.ast for item in tiny.schedule([(x.softmax(-1) @ w).permute(1, 0)])]
  for device in ("CPU", "CUDA", "METAL"):
    sources = set()
    for first in (0, 7, 95, 995):  # range ids that cross a power of ten inside one kernel
      monkeypatch.setattr(tiny, "range_ids", itertools.count(first))
      sources.add(tuple(tiny.lower(ast, tiny.Device.target(device)).src for ast in asts))
    assert len(sources) == 1, device

def test_a_damaged_program_entry_is_lowered_again(tmp_path):
  script = "from tiny import Tensor\nprint((Tensor([1.0, 2.0, 3.0]) * 5 - 0.5).tolist())"
  assert run_python(script, tmp_path, DEVICE="CPU").stdout == "[4.5, 9.5, 14.5]\n"
  for entry in (tmp_path / "cache").rglob("*.json"): entry.write_bytes(entry.read_bytes()[:40] + b"garbage")
  assert run_python(script, tmp_path, DEVICE="CPU").stdout == "[4.5, 9.5, 14.5]\n"

# ------------------------------------------------------------------------------------------------------------------
# GPU lowering (blocks, threads, float4 lanes, shared-memory reductions, gated tails), checked with no GPU: run by the
# PYTHON emulator on the very UOps the CUDA and Metal renderers receive, with bounds-checked loads and stores. Each test
# runs twice: with tiny's GPU optimizations and with NOOPT=1 (one thread per output, no float4, no shared memory).
# Sizes stay small: the emulator runs every thread in Python.

@pytest.fixture(params=["0", "1"], ids=["opt", "NOOPT"])
def gpu_lowering(request, monkeypatch):
  monkeypatch.setenv("NOOPT", request.param)  # read at lowering time, and part of the program cache's key

def emulated(*xs) -> list[Tensor]: return [Tensor(x, device="PYTHON") for x in xs]

@pytest.mark.usefixtures("gpu_lowering")
@pytest.mark.parametrize("n", [1, 3, 1000, 1003])  # a lone thread, less than a float4, blocks with a gated tail
def test_elementwise_on_the_emulator(n):
  a, b = rand_list((n,), 80), rand_list((n,), 81, 0.5, 2.0)
  ta, tb = emulated(a, b)
  assert_close((ta * tb - ta / tb).tolist(), ref_ew(lambda x, y: x * y - x / y, a, b), rtol=1e-5, atol=1e-5)

@pytest.mark.usefixtures("gpu_lowering")
@pytest.mark.parametrize("name", UNARY)
def test_unary_op_on_the_emulator(name):
  op, ref, (lo, hi) = UNARY[name]
  x = rand_list((3, 7), 82, lo, hi)
  assert_close(op(*emulated(x)).tolist(), ref_ew(ref, x), rtol=1e-4, atol=1e-5)

@pytest.mark.usefixtures("gpu_lowering")
@pytest.mark.parametrize("sa, sb", [((5, 1, 3), (7, 1)), ((), (3, 7)), ((1,), (33,)), ((7, 33), (33,))])
def test_broadcasting_on_the_emulator(sa, sb):
  a, b = rand_list(sa, 83), rand_list(sb, 84)
  ta, tb = emulated(a, b)
  got = ta * tb + tb
  assert got.shape == broadcast_shape(sa, sb)
  assert_close(got.tolist(), ref_ew(lambda x, y: x * y + y, a, b))

@pytest.mark.usefixtures("gpu_lowering")
def test_where_on_the_emulator():
  c, a, b = rand_list((3, 7), 85), rand_list((3, 1), 86), rand_list((7,), 87)
  tc, ta, tb = emulated(c, a, b)
  assert (tc > 0).where(ta, tb).tolist() == ref_ew(lambda k, x, y: x if k > 0 else y, c, a, b)

@pytest.mark.usefixtures("gpu_lowering")
@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("shape, axis, keepdim", [((3, 7), None, False), ((3, 7), 0, False), ((3, 7), 1, True),
                                                  ((5, 1, 3), (0, 2), False), ((7, 33), (0, 1), True)])
def test_reduction_on_the_emulator(name, shape, axis, keepdim):
  op, ref = REDUCTIONS[name]
  x = rand_list(shape, 88)
  want = ref_reduce(ref, x, axis, keepdim)
  got = op(*emulated(x), axis=axis, keepdim=keepdim)
  assert got.shape == shape_of(want)
  assert_close(got.tolist(), want, atol=1e-5)

@pytest.mark.usefixtures("gpu_lowering")
def test_sum_with_a_gated_tail_on_the_emulator():
  x = rand_list((4099,), 89, 0.0, 1.0)  # 16 rounds of 256 threads and 3 left over; positive, so nothing cancels
  assert_close(emulated(x)[0].sum().item(), math.fsum(x), rtol=1e-5)

def test_big_sum_runs_as_two_kernels_on_the_emulator(monkeypatch):
  """A sum over BIG_REDUCE or more elements into few outputs is two kernels: 256 partial sums per output, then their
  combine. Nine rows make more partials (9*256) than tiny combines in shared memory; one row would make 256 blocks
  in which every thread combines the block's 128 partials. The bound is lowered to 2**11 here (the emulator takes 50 s
  for sums of 2**15), with plans of its own."""
  monkeypatch.delenv("NOOPT", raising=False)
  monkeypatch.setattr(tiny, "BIG_REDUCE", 2**11)
  monkeypatch.setattr(tiny, "plans", tiny.Bounded())
  x = rand_list((9, 2111), 90, 0.0, 1.0)  # 2111 fills no whole number of chunks: the rest is padded with zeros
  t = emulated(x)[0].sum(axis=1)
  assert len(tiny.render(t)) == 2
  assert_close(t.tolist(), ref_reduce(math.fsum, x, 1), rtol=1e-5)

@pytest.mark.usefixtures("gpu_lowering")
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, axis", [((3, 7), -1), ((7, 33), -1), ((5, 1, 3), 0)])
def test_softmax_on_the_emulator(log, shape, axis):
  x = rand_list(shape, 91, -5, 5)
  t = emulated(x)[0]
  got = t.log_softmax(axis) if log else t.softmax(axis)
  assert_close(got.tolist(), ref_softmax(x, axis, log), rtol=1e-4, atol=1e-5)

@pytest.mark.usefixtures("gpu_lowering")
@pytest.mark.parametrize("sa, sb", [((3, 7), (7, 5)), ((1, 33), (33, 1)), ((33, 1), (1, 33)), ((7,), (7, 5)),
                                    ((2, 3, 7), (2, 7, 5)), ((1, 3, 7), (4, 7, 5))])
def test_matmul_on_the_emulator(sa, sb):
  a, b = rand_list(sa, 92), rand_list(sb, 93)
  ta, tb = emulated(a, b)
  assert_close((ta @ tb).tolist(), ref_matmul(a, b), atol=1e-5)

MOVEMENT_CHAINS = {  # name: (input shape, tiny views, reference)
  "pad then shrink": ((3, 7), lambda t: t.pad(((1, 2), (0, 3))).shrink(((1, 5), (2, 10))),
                      lambda x: ref_getitem(ref_pad(x, ((1, 2), (0, 3))), (slice(1, 5), slice(2, 10)))),
  "flip then pad with a value": ((3, 7), lambda t: t.flip(1).pad(((0, 1), (2, 0)), value=-1.5),
                                 lambda x: ref_pad([r[::-1] for r in x], ((0, 1), (2, 0)), -1.5)),
  "permute then steps": ((3, 7, 5), lambda t: t.permute(2, 0, 1)[::2, 1:, ::-3],
                         lambda x: ref_getitem(ref_permute(x, (2, 0, 1)), (slice(None, None, 2), slice(1, None),
                                                                          slice(None, None, -3)))),
  "index, None and ellipsis": ((5, 1, 3), lambda t: t[None, ..., -2], lambda x: ref_getitem(x, (None, Ellipsis, -2))),
  "reshape of a flipped view": ((3, 7), lambda t: t.flip(0).reshape(7, 3), lambda x: ref_reshape(x[::-1], (7, 3))),
  "expand then reshape": ((3, 1), lambda t: t.expand(3, 5).reshape(15), lambda x: [r[0] for r in x for _ in range(5)]),
  "views of a computed value": ((7, 3), lambda t: (t * 2).permute(1, 0)[1:, ::-2].pad(((0, 0), (3, 4))),
                                lambda x: ref_pad(ref_getitem(ref_permute(ref_ew(lambda v: v * 2, x), (1, 0)),
                                                              (slice(1, None), slice(None, None, -2))),
                                                  ((0, 0), (3, 4)))),
}

@pytest.mark.usefixtures("gpu_lowering")
@pytest.mark.parametrize("name", MOVEMENT_CHAINS)
def test_movement_chain_on_the_emulator(name):
  shape, views, ref = MOVEMENT_CHAINS[name]
  x = rand_list(shape, 94)
  assert views(*emulated(x)).tolist() == ref(x)

@pytest.mark.usefixtures("gpu_lowering")
def test_cat_and_stack_on_the_emulator():
  a, b, c = rand_list((3, 7), 95), rand_list((2, 7), 96), rand_list((3, 2), 97)
  ta, tb, tc = emulated(a, b, c)
  assert Tensor.cat(ta, tb, dim=0).tolist() == ref_cat([a, b], 0)
  assert ta.cat(tc, ta, dim=1).tolist() == ref_cat([a, c, a], 1)
  doubled = ref_ew(lambda v: 2 * v, a)
  assert Tensor.stack(ta, ta * 2, dim=1).tolist() == ref_cat([ref_unsqueeze(a, 1), ref_unsqueeze(doubled, 1)], 1)
  want = ref_reduce(math.fsum, ref_cat([doubled, ref_ew(math.exp, b)], 0), 1)
  assert_close(Tensor.cat(ta * 2, tb.exp()).sum(axis=1).tolist(), want, rtol=1e-5)  # computed parts, then reduced

INTS_AND_BOOLS = {  # name: (inputs, tiny graph, reference, dtype); int lists become int32 tensors, bool lists bool
  "int arithmetic": ([rand_ints((3, 7), 98), rand_ints((7,), 99)], lambda a, b: a * b - a + 3,
                     lambda a, b: ref_ew(lambda x, y: x * y - x + 3, a, b), dtypes.int32),
  "int sum over an axis": ([rand_ints((7, 33), 100)], lambda a: a.sum(axis=0), lambda a: ref_reduce(sum, a, 0),
                           dtypes.int64),
  "int max over an axis": ([rand_ints((7, 33), 101)], lambda a: a.max(axis=1), lambda a: ref_reduce(max, a, 1),
                           dtypes.int32),
  "comparison selects ints": ([rand_ints((3, 7), 102), rand_ints((3, 7), 103)], lambda a, b: (a < b).where(a, b),
                              lambda a, b: ref_ew(min, a, b), dtypes.int32),
  "bool logic": ([ref_ew(lambda v: v > 0, rand_ints((3, 7), 104)), ref_ew(lambda v: v > 0, rand_ints((7,), 105))],
                 lambda p, q: (p & q) ^ (p | q.logical_not()),
                 lambda p, q: ref_ew(lambda x, y: (x and y) != (x or not y), p, q), dtypes.bool),
  "count of true values": ([rand_list((7, 33), 106)], lambda x: (x > 0).sum(axis=1),
                           lambda x: ref_reduce(lambda v: sum(e > 0 for e in v), x, 1), dtypes.int64),
  "float to int truncates": ([rand_list((3, 7), 107, -9, 9)], lambda x: x.int(), lambda x: ref_ew(int, x),
                             dtypes.int32),
}

@pytest.mark.usefixtures("gpu_lowering")
@pytest.mark.parametrize("name", INTS_AND_BOOLS)
def test_ints_and_bools_on_the_emulator(name):
  inputs, graph, ref, dtype = INTS_AND_BOOLS[name]
  got = graph(*emulated(*inputs))
  assert got.dtype == dtype and got.tolist() == ref(*inputs)

# Tensor cores: a matmul of 16-bit floats as a warp's mma.sync tiles, run on the emulator, which multiplies the lanes'
# fragments where the device's layout puts them.

def narrow_matrix(shape, seed, dtype):  # random values that the dtype holds exactly
  rounded = f16 if dtype == dtypes.half else bf16
  return [[rounded(v) for v in row] for row in rand_list(shape, seed)]

@pytest.mark.parametrize("dtype", [dtypes.half, dtypes.bfloat16])
@pytest.mark.parametrize("m, k, n", [(48, 80, 24), (16, 16, 8), (32, 208, 56)])  # tiles 3x5x3, one, 2x13x7
def test_tensor_cores_multiply_16_bit_floats_on_the_emulator(dtype, m, k, n):
  x, w = narrow_matrix((m, k), m + k, dtype), narrow_matrix((k, n), n, dtype)
  out = Tensor(x, dtype=dtype, device="PYTHON") @ Tensor(w, dtype=dtype, device="PYTHON")
  prog = tiny.render(out)[-1]
  assert prog.opts == f"warp {k}:16" and any(u.op is tiny.Ops.WMMA for u in prog.uops) and prog.local_size == (32, 1, 1)
  rounded, ulp = (f16, 2**-10) if dtype == dtypes.half else (bf16, 2**-7)
  want = ref_ew(rounded, ref_matmul(x, w))  # the exact sum, rounded once: the device rounds sums of 16 to float32
  assert out.dtype == dtype
  assert_close(out.float().tolist(), want, rtol=ulp, atol=1e-6)

def test_tensor_cores_take_a_batch_of_matmuls():
  x = [narrow_matrix((16, 32), 70 + i, dtypes.half) for i in range(3)]
  w = [narrow_matrix((32, 8), 80 + i, dtypes.half) for i in range(3)]
  out = Tensor(x, dtype=dtypes.half, device="PYTHON") @ Tensor(w, dtype=dtypes.half, device="PYTHON")
  assert tiny.render(out)[-1].opts == "warp 32:16"
  assert_close(out.float().tolist(), [ref_ew(f16, ref_matmul(a, b)) for a, b in zip(x, w)], rtol=2**-10, atol=1e-6)

@pytest.mark.parametrize("dtype", [dtypes.half, dtypes.bfloat16])
def test_metal_simdgroup_tiles_multiply_on_the_emulator(dtype, monkeypatch):
  """Metal's lowering, run by the emulator with the simdgroup layout, and its source with the instruction."""
  _, runtime = tiny._Device.kinds["PYTHON"]
  monkeypatch.setitem(tiny._Device.kinds, "PYTHON", tiny.DeviceKind(tiny.METAL, runtime))
  monkeypatch.setattr(tiny, "program_cache", {})
  monkeypatch.setattr(tiny, "plans", tiny.Bounded())
  x, w = narrow_matrix((24, 40), 75, dtype), narrow_matrix((40, 16), 76, dtype)
  out = Tensor(x, dtype=dtype, device="PYTHON") @ Tensor(w, dtype=dtype, device="PYTHON")
  prog = tiny.render(out)[-1]
  assert prog.opts == "warp 40:8" and "simdgroup_multiply_accumulate(mc, ma, mb, mc);" in prog.src
  rounded, ulp = (f16, 2**-10) if dtype == dtypes.half else (bf16, 2**-7)
  assert_close(out.float().tolist(), ref_ew(rounded, ref_matmul(x, w)), rtol=ulp, atol=1e-6)

def test_a_matmul_its_tiles_dont_divide_runs_without_tensor_cores():
  x, w = narrow_matrix((17, 33), 71, dtypes.half), narrow_matrix((33, 9), 72, dtypes.half)
  out = Tensor(x, dtype=dtypes.half, device="PYTHON") @ Tensor(w, dtype=dtypes.half, device="PYTHON")
  assert not any(u.op is tiny.Ops.WMMA for p in tiny.render(out) for u in p.uops)
  assert_close(out.float().tolist(), ref_ew(f16, ref_matmul(x, w)), rtol=2**-10, atol=1e-6)

def test_a_transposed_fragment_gives_a_wrong_product_on_the_emulator(monkeypatch):
  """The negative control: the lowering loads A's elements as its transpose, the emulator multiplies by the device's
  layout, and the product is wrong (with the layout right, the same test gives the product)."""
  x, w = narrow_matrix((16, 16), 73, dtypes.half), narrow_matrix((16, 8), 74, dtypes.half)
  def product(core):
    renderer, runtime = tiny._Device.kinds["PYTHON"]
    kind = tiny.DeviceKind(dataclasses.replace(renderer, tensor_cores=(core,)), runtime)
    monkeypatch.setitem(tiny._Device.kinds, "PYTHON", kind)
    monkeypatch.setattr(tiny, "program_cache", {})  # (lowered again: neither a program nor a plan is reused)
    monkeypatch.setattr(tiny, "plans", tiny.Bounded())
    out = Tensor(x, dtype=dtypes.half, device="PYTHON") @ Tensor(w, dtype=dtypes.half, device="PYTHON")
    assert any(u.op is tiny.Ops.WMMA for u in tiny.render(out)[-1].uops)
    return out.float().tolist()
  core = tiny.TENSOR_CORES["mma.m16n8k16.half"]
  want = ref_ew(f16, ref_matmul(x, w))
  assert_close(product(core), want, rtol=2**-10, atol=1e-6)
  wrong = product(core._replace(a=lambda lane, i: core.a(lane, i)[::-1]))
  assert max(abs(p - q) for p, q in zip(flat(wrong), flat(want))) > 0.5

@pytest.mark.usefixtures("gpu_lowering")
def test_float16_on_the_emulator():
  x = [f16(v) for v in rand_list((33,), 108)]
  t = Tensor(x, dtype=dtypes.float16, device="PYTHON").realize()  # a buffer of halves: 2-byte loads and stores
  assert (t * 2).dtype == dtypes.float16 and (t * 2).tolist() == [2 * v for v in x]  # doubling is exact
  assert_close(t.sum().item(), math.fsum(x), rtol=1e-3, atol=1e-2)  # accumulated in float32, rounded to half once

def test_group_reduce_is_wrong_without_its_barrier(monkeypatch):
  """The emulator fills shared memory with NaN and runs each thread of a block up to its next barrier in turn, so a
  missing barrier shows: thread 0 combines the partials before the other threads have written theirs."""
  monkeypatch.delenv("NOOPT", raising=False)
  x = rand_list((3, 100), 109, 0.0, 1.0)
  item, = tiny.schedule([emulated(x)[0].realize().sum(axis=1)])
  prog = tiny.to_program(item.ast, "PYTHON")
  assert tiny.Ops.BARRIER in [u.op for u in prog.uops]
  def run(p: tiny.Program) -> list[float]:
    tiny.Device["PYTHON"].program(p)(*[b.buf for b in item.bufs], global_size=p.global_size, local_size=p.local_size)
    return item.bufs[0].copyout().cast("f").tolist()
  assert_close(run(prog), ref_reduce(math.fsum, x, 1), rtol=1e-5)
  unsafe = run(dataclasses.replace(prog, uops=[u for u in prog.uops if u.op is not tiny.Ops.BARRIER]))
  assert not any(math.isclose(g, w, rel_tol=1e-3) for g, w in zip(unsafe, ref_reduce(math.fsum, x, 1))), unsafe

@pytest.mark.parametrize("device", ["CPU", "CUDA", "METAL", "PYTHON"])
def test_render_needs_no_device(device):
  a, b = realized((7, 33), (7, 33))
  kernels = tiny.render(a * b + 1, (a * b).sum(axis=1), device=device)
  assert [k.name[:2] for k in kernels] in (["E_", "r_"], ["r_", "E_"]) and all(k.name in k.src for k in kernels)

# ------------------------------------------------------------------------------------------------------------------
# GPU dialects: the text of seed 004's kernel, a 4x4 add

SEED_004 = [  # (device, NOOPT, kernel name, what its source holds)
  ("CUDA", "0", "E_4_4", ["float4 ", "make_float4(", "__launch_bounds__(4)", "threadIdx.x"]),  # one block, float4 lanes
  ("CUDA", "1", "E_16", ["__launch_bounds__(1)", "blockIdx.x"]),                               # a block per element
  ("METAL", "0", "E_4_4", ["float4 ", "(val0+val1)", "lid.x"]),                                # adds float4s
  ("METAL", "1", "E_16", ["gid.x"]),
]

@pytest.mark.parametrize("device, noopt, name, parts", SEED_004, ids=[f"{d}-NOOPT={n}" for d, n, _, _ in SEED_004])
def test_4x4_add_kernel_text(monkeypatch, device, noopt, name, parts):
  monkeypatch.setenv("NOOPT", noopt)
  kernel, = tiny.render(Tensor.empty(4, 4) + Tensor.empty(4, 4), device=device)
  assert kernel.name == name and all(p in kernel.src for p in parts), kernel.src
  assert ("float4" in kernel.src) == (noopt == "0"), kernel.src

def test_cuda_kernels_define_infinity_and_nan():
  """NVRTC has no math.h; a max starts from -INFINITY."""
  kernel, = tiny.render(Tensor.empty(3, 7).max(axis=1), device="CUDA")
  header = "#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fffffff))\n"
  assert kernel.src.startswith(header) and "-INFINITY" in kernel.src, kernel.src

# ------------------------------------------------------------------------------------------------------------------
# raw kernels: hand-written source through tiny's runtime

def test_raw_kernel_runs_c_on_the_cpu():
  src = ("void axpy(float* restrict out, const float* restrict x, const float* restrict y) {\n"
         "  for (int i = 0; i < 1003; i++) out[i] = 2.0f * x[i] + y[i];\n}")
  x, y = rand_list((1003,), 110), rand_list((1003,), 111)
  out = Tensor.empty(1003, device="CPU")
  tiny.RawKernel("axpy", src, device="CPU")(out, Tensor(x, device="CPU"), Tensor(y, device="CPU"))
  assert out.tolist() == ref_ew(lambda a, b: f32(2 * a + b), x, y)

def test_raw_kernels_from_one_source_run_their_own_function():
  src = "void one(float* restrict o) { o[0] = 1; }\nvoid two(float* restrict o) { o[0] = 2; }"
  out = Tensor.empty(1, device="CPU")
  tiny.RawKernel("one", src, device="CPU")(out)
  assert out.tolist() == [1.0]
  tiny.RawKernel("two", src, device="CPU")(out)
  assert out.tolist() == [2.0]

def test_cpu_chunks_each_run_once_however_many_cores_and_callers():
  """A global_size of 7 runs chunks 0..6 once each, on however many cores this machine has, while other threads
  launch kernels of their own."""
  src = "void count(int* restrict out, const int core) { out[core] += core + 1; }"
  kernel = tiny.RawKernel("count", src, global_size=(7,), device="CPU")
  outs = [Tensor.full((7,), 10 * i, dtype=dtypes.int32, device="CPU").realize() for i in range(4)]  # 4 buffers
  with concurrent.futures.ThreadPoolExecutor(4) as pool: list(pool.map(kernel, outs))
  assert [out.tolist() for out in outs] == [[10 * i + core + 1 for core in range(7)] for i in range(4)]

@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_forked_child_runs_threaded_kernels_and_compiles(tmp_path):  # (its parent's threads don't exist there)
  script = """
    import os
    from tiny import Tensor
    x = Tensor.rand(2048, 1024).realize()
    print(round(x.softmax(-1).sum().item()))
    if (pid := os.fork()) == 0:
      print(round(x.softmax(-1).sum().item()), round((x * 3 + 1).exp2().min().item()), flush=True)
      os._exit(0)
    os.waitpid(pid, 0)
  """
  assert run_python(script, tmp_path, DEVICE="CPU", THREADS="2").stdout == "2048\n2048 2\n"

def test_a_threaded_cpu_kernel_given_no_buffer_raises_and_leaves_the_workers_ready():
  src = "void count(int* restrict out, const int core) { out[core] += core + 1; }"
  kernel = tiny.RawKernel("count", src, global_size=(4,), device="CPU")
  with pytest.raises(TypeError): kernel.fn(1.5, global_size=(4, 1, 1), local_size=(1, 1, 1))  # no pointer
  out = Tensor.full((4,), 0, dtype=dtypes.int32, device="CPU").realize()
  for _ in range(3): kernel(out)  # each chunk once a call, whoever runs it
  assert out.tolist() == [3, 6, 9, 12]

def test_a_threaded_cpu_kernel_of_more_buffers_than_the_pool_calls_runs_every_chunk():
  n = tiny.Workers.most + 1
  args = ", ".join(f"int* restrict b{i}" for i in range(n))
  src = f"void many({args}, const int core) {{ b0[core] += core + 1; b{n - 1}[core] += 10; }}"
  bufs = [Tensor.full((3,), i, dtype=dtypes.int32, device="CPU").contiguous().realize() for i in range(n)]
  tiny.RawKernel("many", src, global_size=(3,), device="CPU")(*bufs)
  assert bufs[0].tolist() == [1, 2, 3] and bufs[-1].tolist() == [n + 9] * 3

def test_threaded_cpu_kernels_from_many_python_threads_each_run_whole():  # the pool runs one kernel at a time
  src = "void fill(int* restrict out, const int* restrict k, const int core) { out[core] += k[0] * (core + 1); }"
  kernel = tiny.RawKernel("fill", src, global_size=(4,), device="CPU")
  outs = [Tensor.full((4,), k, dtype=dtypes.int32, device="CPU").contiguous().realize() for k in range(6)]
  ks = [Tensor([k + 1], dtype=dtypes.int32, device="CPU").realize() for k in range(6)]
  def work(k):
    for _ in range(200): kernel(outs[k], ks[k], wait=False)
  with concurrent.futures.ThreadPoolExecutor(6) as pool: list(pool.map(work, range(6)))
  assert [o.tolist() for o in outs] == [[k + 200 * (k + 1) * (c + 1) for c in range(4)] for k in range(6)]

def test_device_names_ignore_case_and_unknown_ones_are_named():
  assert (Tensor([1.0], device="cpu") + 1).tolist() == [2.0]
  with pytest.raises(ValueError, match="TPU"): Tensor([1.0], device="tpu")
  with pytest.raises(RuntimeError, match="CPU and PYTHON"): Tensor([1.0], device="CPU") + Tensor([1.0], device="PYTHON")

def test_emulator_refuses_raw_kernels():
  with pytest.raises(ValueError, match="PYTHON"): tiny.RawKernel("k", "void k(float* a) {}", device="PYTHON")

def test_cpu_compile_error_shows_compiler_log_and_source():
  with pytest.raises(tiny.CompileError) as e: tiny.RawKernel("bad", "void bad(float* a {", device="CPU")
  assert "error" in str(e.value) and "void bad(float* a {" in str(e.value)

# ------------------------------------------------------------------------------------------------------------------
# runtimes off their hardware: every error a user without a GPU (or without a Mac) can meet says what to do

def have_nvrtc() -> bool:
  try: return bool(cuda_rt.nvrtc_version())
  except RuntimeError: return False

needs_nvrtc = pytest.mark.skipif(not have_nvrtc(), reason="no libnvrtc (pip install nvidia-cuda-nvrtc)")
NEED_GPU = "DEVICE=CUDA needs an NVIDIA GPU and driver"

def test_a_double_exp_is_the_c_librarys():  # (2**(x * log2 e) rounds the product: some 300 ulps off at 700)
  xs = [700.0, -700.0, 1.5, 0.0, 709.7, -745.0, 3.0e-5]
  assert Tensor(xs, dtype=dtypes.float64).exp().tolist() == [math.exp(x) for x in xs]
  if have_nvrtc():
    kernel, = tiny.render(Tensor.empty(5, dtype=dtypes.float64).exp(), device="CUDA")
    assert "exp(" in kernel.src and cuda_rt.nvrtc_compile(kernel.src, "sm_80")[:4] == b"\x7fELF"

@needs_nvrtc
def test_uint64_kernels_compile_for_cuda_and_render_for_metal():
  u = Tensor.empty(33, dtype=dtypes.uint64)
  kernel, = tiny.render((u * 3 + (2**64 - 1)) // 7, device="CUDA")
  assert "unsigned long long" in kernel.src and "18446744073709551615ull" in kernel.src
  assert cuda_rt.nvrtc_compile(kernel.src, "sm_80")[:4] == b"\x7fELF"
  assert "device ulong*" in tiny.render(u * 3, device="METAL")[0].src

@pytest.fixture
def fresh(monkeypatch):
  """cuda_rt forgets the libraries it loaded, so the next call looks them up again under the test's environment."""
  monkeypatch.setattr(cuda_rt, "_loaded", {})
  return monkeypatch

def test_nvrtc_at_a_bogus_path_is_named(fresh):
  fresh.setenv("TINY_LIBNVRTC", "/nonexistent/libnvrtc.so.13")
  with pytest.raises(RuntimeError, match=r"needs NVRTC .*: no loadable libnvrtc was found "
                                         r"\(tried /nonexistent/libnvrtc.so.13\); set TINY_LIBNVRTC"):
    cuda_rt.nvrtc_version()

def test_missing_nvrtc_lists_the_names_and_folders_tried(fresh):
  fresh.setenv("CUDA_PATH", "/nonexistent/cuda")
  fresh.setitem(cuda_rt.LIBS, "libnvrtc", ("TINY_LIBNVRTC", ("libnvrtc_missing.so",), "need", ""))
  with pytest.raises(RuntimeError) as e: cuda_rt.nvrtc_version()
  for part in ("libnvrtc_missing.so in", "/nonexistent/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
               "nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "system library path", "TINY_LIBNVRTC"):
    assert part in str(e.value)

def test_unloadable_library_gives_the_loaders_reason(fresh, tmp_path):
  (tmp_path / "libnvrtc.so").write_text("not a library" * 100)
  fresh.setenv("TINY_LIBNVRTC", str(tmp_path / "libnvrtc.so"))
  with pytest.raises(RuntimeError, match="invalid ELF header"): cuda_rt.nvrtc_version()

@needs_nvrtc
def test_nvrtc_compile_error_shows_log_and_numbered_source():
  src = 'extern "C" __global__ void k(float* a) {\n  a[0] = undefined_b;\n}'
  with pytest.raises(cuda_rt.CompileError) as e: cuda_rt.nvrtc_compile(src, "sm_90")
  assert "nvrtcCompileProgram failed with NVRTC_ERROR_COMPILATION" in str(e.value)
  assert 'kernel.cu(2): error: identifier "undefined_b" is undefined' in str(e.value)
  assert "   2   a[0] = undefined_b;" in str(e.value)

HALF_KERNEL = '#include <cuda_fp16.h>\nextern "C" __global__ void twice(half* a) { a[threadIdx.x] *= __float2half(2); }'

@needs_nvrtc
def test_half_kernel_compiles_with_cuda_fp16_h():  # the header comes with nvidia-cuda-runtime, or a CUDA toolkit
  assert cuda_rt.nvrtc_compile(HALF_KERNEL, "sm_90")[:4] == b"\x7fELF"

@needs_nvrtc
def test_half_kernel_without_cuda_fp16_h_says_where_it_looked(monkeypatch, tmp_path):
  monkeypatch.setattr(cuda_rt, "_toolkits", lambda: [])
  monkeypatch.setattr(cuda_rt, "_wheels", lambda sub: [str(tmp_path / sub)])
  with pytest.raises(RuntimeError, match=f"cuda_fp16.h and cuda_bf16.h, which are in none of {tmp_path}"):
    cuda_rt.nvrtc_compile(HALF_KERNEL, "sm_90")

@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tensor_core_kernels_compile_without_spills(arch):
  for dtype in dtypes.narrow:
    prog = tiny.render(Tensor.empty(64, 48, dtype=dtype) @ Tensor.empty(48, 40, dtype=dtype), device="CUDA")[-1]
    assert "mma.sync.aligned.m16n8k16.row.col.f32" in prog.src
    log: list[str] = []
    assert cuda_rt.nvrtc_compile(prog.src, arch, opts=("--ptxas-options=-v",), log=log)[:4] == b"\x7fELF"
    assert "0 bytes spill stores, 0 bytes spill loads" in log[0], log[0]

def test_missing_driver_is_one_plain_sentence(fresh):
  fresh.setenv("TINY_LIBCUDA", "/nonexistent/libcuda.so.1")
  with pytest.raises(RuntimeError) as e: cuda_rt.CUDADevice()
  assert str(e.value) == f"{NEED_GPU}: no loadable libcuda was found (tried /nonexistent/libcuda.so.1); " \
                         "set TINY_LIBCUDA to the library's path"

def test_driver_without_a_gpu_is_one_plain_sentence(fresh, tmp_path):
  """A driver on a machine with no GPU answers cuInit with CUDA_ERROR_NO_DEVICE (100). The stand-in libcuda has every
  function cuda_rt looks up, from cuda_rt's own table."""
  answers = {"cuInit": "return 100;", "cuGetErrorName": '*(const char **)p = "CUDA_ERROR_NO_DEVICE"; return 0;',
             "cuGetErrorString": '*(const char **)p = "no CUDA-capable device is detected"; return 0;'}
  c = "\n".join(f"int {f}(int s, void *p) {{ {answers.get(f, 'return 0;')} }}" for f in cuda_rt.API["libcuda"])
  (tmp_path / "libcuda.c").write_text(c)
  subprocess.run([os.getenv("CC", "cc"), "-shared", "-fPIC", "-o", tmp_path / "libcuda.so", tmp_path / "libcuda.c"],
                 check=True)
  fresh.setenv("TINY_LIBCUDA", str(tmp_path / "libcuda.so"))
  with pytest.raises(RuntimeError) as e: cuda_rt.CUDADevice()
  assert str(e.value) == f"{NEED_GPU}: cuInit failed with CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"

# a stand-in libcuda that keeps memory in host malloc, runs no kernel, and refuses what the driver refuses: a call from
# a thread with no current context, and an allocation of 0 bytes
PER_THREAD_DRIVER = r"""
#include <stdlib.h>
#include <string.h>
static __thread void *current;
#define NEEDS_CONTEXT if (!current) return 201;
int cuInit(unsigned flags) { return 0; }
int cuDeviceGet(int *dev, int i) { *dev = 0; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) { *v = attr == 1 ? 1024 : attr == 75 ? 9 : 0; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)&cuInit; return 0; }
int cuCtxSetCurrent(void *ctx) { current = ctx; return 0; }
int cuCtxSynchronize(void) { NEEDS_CONTEXT return 0; }
int cuMemAlloc_v2(size_t *p, size_t n) { NEEDS_CONTEXT if (!n) return 1; *p = (size_t)malloc(n); return 0; }
int cuMemFree_v2(size_t p) { NEEDS_CONTEXT free((void *)p); return 0; }
int cuMemcpyHtoD_v2(size_t d, void *s, size_t n) { NEEDS_CONTEXT memcpy((void *)d, s, n); return 0; }
int cuMemcpyDtoH_v2(void *d, size_t s, size_t n) { NEEDS_CONTEXT memcpy(d, (void *)s, n); return 0; }
int cuModuleLoadData(void **m, const void *image) { NEEDS_CONTEXT *m = (void *)image; return 0; }
int cuModuleGetFunction(void **f, void *m, const char *name) { NEEDS_CONTEXT *f = m; return 0; }
int cuLaunchKernel(void *f) { NEEDS_CONTEXT return 0; }
int cuEventCreate(void) { return 0; }
int cuEventRecord(void) { return 0; }
int cuEventSynchronize(void) { return 0; }
int cuEventDestroy_v2(void) { return 0; }
int cuEventElapsedTime(void) { return 0; }
int cuGetErrorName(int s, const char **p) {
  *p = s == 201 ? "CUDA_ERROR_INVALID_CONTEXT" : "CUDA_ERROR_INVALID_VALUE"; return 0; }
int cuGetErrorString(int s, const char **p) { *p = "refused"; return 0; }
"""

@needs_nvrtc
def test_the_driver_is_called_with_the_context_current_on_each_thread(tmp_path):
  """New kernels are loaded by compile workers and buffers freed by whichever thread drops them: each call makes the
  context current on its own thread first. An empty tensor still allocates a few bytes, as the driver refuses 0."""
  (tmp_path / "libcuda.c").write_text(PER_THREAD_DRIVER)
  subprocess.run([os.getenv("CC", "cc"), "-shared", "-fPIC", "-o", tmp_path / "libcuda.so", tmp_path / "libcuda.c"],
                 check=True)
  r = run_python("""
    import threading
    from tiny import Tensor
    print(Tensor([1.0, 2.0, 3.0]).tolist(), Tensor.empty(2, 0).tolist())
    (Tensor.empty(5) * 2).realize()  # loaded by a compile worker, launched here
    worker = threading.Thread(target=lambda: print(Tensor([4.0]).tolist(), (Tensor.empty(3) + 1).realize().shape))
    worker.start(), worker.join()
  """, tmp_path, DEVICE="CUDA", TINY_LIBCUDA=str(tmp_path / "libcuda.so"))
  assert r.stdout == "[1.0, 2.0, 3.0] [[], []]\n[4.0] (3,)\n", r.stdout

def test_device_cuda_without_a_driver_fails_with_that_sentence(tmp_path):
  r = run_python("""
    from tiny import Tensor
    (Tensor([1.0, 2.0, 3.0]) * 2).realize()
  """, tmp_path, DEVICE="CUDA", TINY_LIBCUDA="/nonexistent/libcuda.so.1")
  last = r.stdout.strip().splitlines()[-1]
  assert r.returncode != 0 and last.startswith(f"RuntimeError: {NEED_GPU}: no loadable libcuda"), r.stdout
  assert "During handling" not in r.stdout, r.stdout  # no OSError chained underneath

def test_metal_rt_imports_without_loading_a_library():
  code = ("import ctypes, ctypes.util\n"
          "def boom(*a, **k): raise AssertionError('loaded a library at import')\n"
          "ctypes.CDLL = ctypes.util.find_library = boom\n"
          "import metal_rt\n")
  subprocess.run([sys.executable, "-c", code], check=True, cwd=HERE)

@pytest.mark.skipif(sys.platform == "darwin", reason="checks the refusal off macOS")
def test_metal_device_off_macos_says_metal_needs_macos(monkeypatch):
  loaded = []
  monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: loaded.append(a))
  with pytest.raises(RuntimeError, match=r"Metal needs macOS \(with Metal.framework\)"): metal_rt.MetalDevice()
  assert loaded == []  # never CDLL(None), which would silently be this very program

# What Apple documents for each selector (developer.apple.com/documentation/metal), restated independently of
# metal_rt: NSUInteger/NSInteger are 64-bit, BOOL is c_bool, CFTimeInterval is double, NSError** is POINTER(c_void_p).
DOCUMENTED = {
  "newBufferWithLength:options:": (c_void_p, [c_ulong, c_ulong]),          # (NSUInteger length, MTLResourceOptions)
  "setBuffer:offset:atIndex:": (None, [c_void_p, c_ulong, c_ulong]),        # (id<MTLBuffer>, NSUInteger, NSUInteger)
  "dispatchThreadgroups:threadsPerThreadgroup:": (None, [metal_rt.MTLSize, metal_rt.MTLSize]),  # by value
  "GPUStartTime": (c_double, []), "GPUEndTime": (c_double, []),             # CFTimeInterval
  "newLibraryWithSource:options:error:": (c_void_p, [c_void_p, c_void_p, POINTER(c_void_p)]),
  "newComputePipelineStateWithFunction:error:": (c_void_p, [c_void_p, POINTER(c_void_p)]),
  "newFunctionWithName:": (c_void_p, [c_void_p]),
  "newCommandQueueWithMaxCommandBufferCount:": (c_void_p, [c_ulong]),
  "maxTotalThreadsPerThreadgroup": (c_ulong, []),
  "status": (c_ulong, []),                                                  # MTLCommandBufferStatus is NSUInteger
  "setMathMode:": (None, [c_long]), "setMathFloatingPointFunctions:": (None, [c_long]),  # NSInteger enums
  "setFastMathEnabled:": (None, [c_bool]), "respondsToSelector:": (c_bool, [c_void_p]),
  "stringWithUTF8String:": (c_void_p, [c_char_p]), "UTF8String": (c_char_p, []),
  "setComputePipelineState:": (None, [c_void_p]), "contents": (c_void_p, []), "error": (c_void_p, []),
}

@pytest.mark.parametrize("name", DOCUMENTED)
def test_metal_selector_prototype_is_the_documented_one(name):
  restype, argtypes = metal_rt.SELECTORS[name]
  assert (restype, list(argtypes)) == DOCUMENTED[name]

def test_metal_sizes_are_64_bit_and_mtlsize_goes_by_value():
  assert ctypes.sizeof(metal_rt.NSUInteger) == ctypes.sizeof(metal_rt.NSInteger) == 8
  assert [t for _, t in metal_rt.MTLSize._fields_] == [c_ulong] * 3 and ctypes.sizeof(metal_rt.MTLSize) == 24
  assert issubclass(metal_rt.MTLSize, ctypes.Structure)  # a Structure in argtypes goes by value, a POINTER would not

def test_every_metal_selector_sent_has_a_prototype_and_every_prototype_is_sent():
  src = (HERE / "metal_rt.py").read_text()
  # a lookahead, so that send(send(err, "a"), "b") yields both "a" and "b"
  sent = set(re.findall(r'(?=send\([^,()]+(?:\([^()]*\))?, "([^"]+)")', src))
  sent |= set(re.findall(r'selector\("([^"]+)"\)', src))
  assert sent == set(metal_rt.SELECTORS)

def test_each_metal_selector_gets_its_own_objc_msgsend(monkeypatch):
  libc = ctypes.CDLL(None)
  class FakeObjC:  # libc's labs stands in for objc_msgSend: only the prototypes set on it are inspected
    def __getitem__(self, name): return libc["labs"]
  monkeypatch.setattr(metal_rt, "runtime", lambda: (FakeObjC(), None))
  metal_rt.messenger.cache_clear()
  try:
    fns = {name: metal_rt.messenger(name) for name in metal_rt.SELECTORS}
    assert len({id(fn) for fn in fns.values()}) == len(metal_rt.SELECTORS)
    for name, (restype, argtypes) in metal_rt.SELECTORS.items():
      assert fns[name].restype == restype and fns[name].argtypes == [c_void_p, c_void_p, *argtypes]
  finally: metal_rt.messenger.cache_clear()

# ------------------------------------------------------------------------------------------------------------------
# never a silent wrong answer: index math past int32, C's undefined corners, nan, kernel parameters, threads

def same(got, want):  # equal, with nan equal to nan
  return shape_of(got) == shape_of(want) and all(g == w or (g != g and w != w) for g, w in zip(flat(got), flat(want)))

def big_view(vals: list, device: str) -> Tensor:
  """2**31 * len(vals) elements from a small buffer: element k is vals[k % len(vals)]."""
  n = len(vals)
  return Tensor(vals, device=device).reshape(n, 1, 1).expand(n, 2**16, 2**15).permute(2, 1, 0).reshape(-1)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("start, count", [(2**31 + 3, 4), (2**31 + 3, 11), (3 * 2**31 - 5, 7)])
def test_views_address_past_int32(device, start, count):
  vals = [1.0, 2.0, 3.0, 4.0, 5.0]
  assert big_view(vals, device)[start:start + count].tolist() == [vals[k % 5] for k in range(start, start + count)]

def test_elementwise_past_int32_computes_the_window_it_is_asked_for():
  x = (Tensor.zeros(2**31 + 1, dtype="uchar") + 1)[-3:]
  assert x.tolist() == [1, 1, 1] and x.dtype == dtypes.uchar

def test_reductions_past_int32_count_every_element_once():
  a, b = Tensor.ones(65536), Tensor.ones(32769)
  assert (a.reshape(-1, 1) * b.reshape(1, -1)).sum().item() == f32(65536 * 32769)
  assert Tensor.ones(2**31 + 8).sum().item() == f32(2**31 + 8)
  assert Tensor([1.0, 2.0, 3.0]).reshape(3, 1).expand(3, 2**30).sum().item() == 6 * 2**30

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_arange_past_int32_counts_on(device):
  x = Tensor.arange(2**31 + 10, device=device)
  assert x[-1].item() == 2**31 + 9 and x[-13:-5].tolist() == list(range(2**31 - 3, 2**31 + 5))

def test_a_shape_no_index_can_count_is_refused_at_the_op():
  with pytest.raises(ValueError, match="int64"): Tensor.ones(2**40, 2**40)
  with pytest.raises(ValueError, match="int64"): Tensor.ones(2**40, 1).expand(2**40, 2**40)

def test_index_math_is_64_bit_only_where_it_must_be():
  big = Tensor.empty(2**31 + 5).sum()
  small = Tensor.empty(1003, 7).sum(axis=1)
  for device, wide in (("CPU", "long long"), ("CUDA", "long long"), ("METAL", "long")):
    assert any(f"{wide} " in p.src for p in tiny.render(big, device=device))
    assert not any("long" in p.src for p in tiny.render(small, device=device))

def test_a_parameter_whose_reads_fold_away_keeps_its_place():
  for device in ("CPU", "PYTHON"):
    a, b = Tensor([1, 2, 3, 4], device=device), Tensor([7, 7, 7, 7], device=device)
    assert (b + a * 0).tolist() == [7, 7, 7, 7]
  a, b = Tensor.empty(4, dtype="int"), Tensor.empty(4, dtype="int")
  for device in ("CPU", "CUDA", "METAL"):
    prog, = tiny.render(b + a * 0, device=device)
    assert all(f"data{i}" in prog.src.split("{")[0] for i in range(3)), prog.src

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_bool_arithmetic_stays_bool(device):
  m = Tensor([True, True, False], device=device)
  assert (m + m).int().tolist() == [1, 1, 0]
  assert ((m + m) == True).tolist() == [True, True, False]  # noqa: E712
  assert (m * m + m).tolist() == [True, True, False]


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_folds_keep_signed_zeros(device):
  """A fold is exact for every value: x+0.0 is 0.0 for x = -0.0 (IEEE 754), x-0.0 and x*1 keep it, abs(-0.0) is 0.0,
  and max keeps its first operand of -0.0 and 0.0 with a constant first too."""
  def signs(t): return [math.copysign(1, v) for v in t.tolist()]
  x = Tensor([-0.0, 0.0, -1.5, 2.5, -0.0], device=device)
  assert signs(x + 0.0) == [1, 1, -1, 1, 1] and signs(0.0 + x) == [1, 1, -1, 1, 1]
  assert signs(x - 0.0) == signs(x * 1) == signs(x) == [-1, 1, -1, 1, -1]
  assert signs(x.abs()) == [1] * 5 and x.abs().tolist() == [0.0, 0.0, 1.5, 2.5, 0.0]
  assert signs(Tensor.zeros(5, device=device).maximum(x)) == [1, 1, 1, 1, 1]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_negative_constants_compose_in_every_dialect(device):
  """A negative constant renders in parentheses, so an op that negates it never writes --2 (which C reads as a
  decrement)."""
  d = Tensor([3, -1, 2, -4, 7], device=device)
  assert (-2 // d).tolist() == [-2 // v for v in [3, -1, 2, -4, 7]] and (-7 % d).tolist() == [-7 % v for v in
                                                                                                [3, -1, 2, -4, 7]]
  f = Tensor([0.5, -2.0, 3.0], device=device)
  assert (-(f * -2.5) - -1.5).tolist() == [v * 2.5 + 1.5 for v in [0.5, -2.0, 3.0]]
  for dialect in ("CPU", "CUDA", "METAL"):
    for prog in tiny.render(-2 // Tensor.empty(5, dtype="int"), -(Tensor.empty(3) * -2.5), device=dialect):
      assert "--" not in prog.src, prog.src
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_reduce_of_a_value_that_does_not_change_in_the_loop(device):
  assert Tensor.ones(17, 4, device=device).sum().item() == 68
  assert Tensor.ones(5, 8, device=device).mean().item() == 1
  y, want = Tensor([[0.5]], device=device), 0.5
  for _ in range(8): y, want = y * 1.5 + 0.25, f32(f32(want * 1.5) + 0.25)  # too deep to inline into the loop
  assert_close(y.expand(17, 3).sum().item(), want * 51)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_float_constants_are_rounded_to_float32_everywhere(device):
  assert (Tensor([0.1, 0.2], device=device) == 0.1).tolist() == [True, False]
  assert (Tensor([0.1], device=device) + 0.2).item() == f32(f32(0.1) + f32(0.2))

NAN, INF = float("nan"), float("inf")

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("n", [3, 17, 1003, 40009])
def test_nan_wins_max_and_min_wherever_it_is(device, n):
  if device == "PYTHON" and n > 1003: pytest.skip("the emulator is slow")
  vals = rand_list((n,), n)
  for at in (0, n // 2, n - 1):
    x = Tensor(vals[:at] + [NAN] + vals[at + 1:], device=device)
    assert math.isnan(x.max().item()) and math.isnan(x.min().item())
  assert same(x.reshape(1, n).softmax().tolist(), [[NAN] * n])

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_nan_wins_maximum_and_minimum(device):
  a, b = Tensor([NAN, 1.0, 2.0, NAN], device=device), Tensor([1.0, NAN, 3.0, NAN], device=device)
  assert same(a.maximum(b).tolist(), [NAN, NAN, 3.0, NAN]) and same(a.minimum(b).tolist(), [NAN, NAN, 2.0, NAN])
  rows = Tensor([[1.0, 2.0, 3.0], [4.0, NAN, 5.0]], device=device)
  assert same(rows.max(axis=1).tolist(), [3.0, NAN]) and same(rows.min(axis=0).tolist(), [1.0, NAN, 3.0])
  assert same(rows.softmax().tolist()[1], [NAN] * 3)

def ref_shift(a: int, b: int, op: str, dtype) -> int:  # the documented result: past the width every bit is out
  if not 0 <= b < 8 * dtype.itemsize: return 0 if op == "<<" or a >= 0 else -1
  return tiny.truncate(dtype, a << b if op == "<<" else a >> b)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint32, dtypes.int8, dtypes.int64])
def test_shifts_by_any_amount_have_one_result(device, dtype):
  lo, hi = dtypes.limits(dtype)
  a = [1, lo, hi, 5, -7 if lo < 0 else 7, 3, lo + 1, 12]
  b = [40, 1, 31, -1, 3, 8 * dtype.itemsize, 65, 2]
  ta, tb = Tensor(a, dtype=dtype, device=device), Tensor(b, dtype=dtype if lo < 0 else dtypes.int32, device=device)
  for op, fn in (("<<", operator.lshift), (">>", operator.rshift)):
    got = fn(ta, tb.cast(dtype)).tolist()
    assert got == [ref_shift(x, tiny.truncate(dtype, y), op, dtype) for x, y in zip(a, b)], op

def idiv(a: Tensor, b: Tensor) -> Tensor: return Tensor(a.uop.alu(tiny.Ops.IDIV, b.uop), device=a.device)
def imod(a: Tensor, b: Tensor) -> Tensor: return Tensor(a.uop.alu(tiny.Ops.MOD, b.uop), device=a.device)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.int8])
def test_division_by_zero_and_int_min_by_minus_one_have_one_result(device, dtype):
  lo, hi = dtypes.limits(dtype)
  a, b = [7, -7, lo, lo, hi, 9], [0, 2, -1, 0, -3, -1]
  if lo == 0: a, b = [7, 70, lo, 1, hi, 9], [0, 2, 1, 0, 3, 5]
  ta, tb = Tensor(a, dtype=dtype, device=device), Tensor(b, dtype=dtype, device=device)
  def trunc(x, y): return 0 if y == 0 else tiny.truncate(dtype, abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1))
  assert idiv(ta, tb).tolist() == [trunc(x, y) for x, y in zip(a, b)]
  assert imod(ta, tb).tolist() == [0 if y == 0 else tiny.truncate(dtype, x - y * trunc(x, y)) for x, y in zip(a, b)]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.uint32])
def test_floor_division_and_remainder_are_pythons_and_zero_by_zero(device, dtype):
  lo, hi = dtypes.limits(dtype)
  a = ref_ew(lambda v: tiny.truncate(dtype, v), rand_ints((5, 7), 130, -60 if lo < 0 else 0, 60 if lo < 0 else 250))
  b = rand_ints((5, 7), 131, -4 if lo < 0 else 0, 4)  # zeros and, for signed ints, negatives among them
  a[0][0], b[0][0] = lo, -1 if lo < 0 else 1
  ta, tb = Tensor(a, dtype=dtype, device=device), Tensor(b, dtype=dtype, device=device)
  want = lambda f: ref_ew(lambda x, y: 0 if y == 0 else tiny.truncate(dtype, f(x, y)), a, b)  # noqa: E731
  assert (ta // tb).tolist() == want(operator.floordiv) and (ta % tb).tolist() == want(operator.mod)
  assert (ta // 3).tolist() == ref_ew(lambda x: tiny.truncate(dtype, x // 3), a)
  assert (Tensor([7.5, -7.5]) // 2).tolist() == [3.0, -4.0] and \
    (Tensor([7.5, -7.5]) % 2).tolist() == [1.5, 0.5]  # floats too

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_true_division_is_rounded_once(device, dtype):  # not a * (1/b): 1 ulp off, and 1/b overflows for tiny b
  rnd = f32 if dtype == dtypes.float32 else float
  small = 1e-40 if dtype == dtypes.float32 else 1e-310  # (subnormal: its reciprocal overflows)
  a = [rnd(v) for v in [3.0, 10.0, -7.0, small, 3 * small, 3e38, 1.0, -1.0, 0.0, 5.811181] + rand_list((13,), 60)]
  b = [rnd(v) for v in [10.0, 3.0, 3.0, small, small, 3e38, 0.0, 0.0, 0.0, -2.4424286] + rand_list((13,), 61, 0.1, 9)]
  def ref(x, y):  # a double's quotient of two floats, rounded to float: rounded once (53 >= 2 * 24 + 2 bits)
    if y == 0: return math.nan if x == 0 else math.copysign(math.inf, x)
    return rnd(x / y)
  got = (Tensor(a, dtype=dtype, device=device) / Tensor(b, dtype=dtype, device=device)).tolist()
  assert [str(v) for v in got] == [str(ref(x, y)) for x, y in zip(a, b)]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_div_rounds_toward_zero_or_down_as_asked(device):  # as torch's div(rounding_mode=)
  a, b = rand_ints((3, 7), 132, -50, 50), rand_ints((3, 7), 133, 1, 9)
  b = ref_ew(lambda v, s: v * s, b, [[(-1) ** (i + j) for j in range(7)] for i in range(3)])  # both signs
  for dtype in (dtypes.int32, dtypes.float32):
    ta, tb = Tensor(a, dtype=dtype, device=device), Tensor(b, dtype=dtype, device=device)
    assert ta.div(tb, rounding_mode="trunc").tolist() == ref_ew(lambda x, y: math.trunc(x / y), a, b)
    assert ta.div(tb, rounding_mode="floor").tolist() == ref_ew(lambda x, y: math.floor(x / y), a, b)
  with pytest.raises(RuntimeError, match="rounding_mode"): Tensor([1.0]).div(2, rounding_mode="typo")

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint32, dtypes.int8, dtypes.uint8, dtypes.int64])
def test_float_to_int_saturates_and_nan_is_zero(device, dtype):
  lo, hi = dtypes.limits(dtype)
  vals = [NAN, INF, -INF, 3e9, -3e9, 1e20, -1e20, 2.7, -2.7, 255.9, -128.5, 0.0]
  want = [0 if v != v else hi if v >= hi + 1 else lo if v <= lo else math.trunc(v) for v in map(f32, vals)]
  assert Tensor(vals, device=device).cast(dtype).tolist() == want
  assert Tensor(vals, device=device).half().cast(dtype).tolist() == \
    [0 if v != v else hi if v >= hi + 1 else lo if v <= lo else math.trunc(v)
     for v in (tiny.truncate(dtypes.half, v) for v in vals)]

def test_signed_overflow_wraps_on_every_device():
  for device in ("CPU", "PYTHON"):
    t = Tensor([2**31 - 1, 5], device=device)
    assert ((t + 1) > t).tolist() == [False, True]
    assert (t * 2).tolist() == [-2, 10]

UB_PROGRAM = """
from tiny import Tensor, dtypes, Ops
nan, inf = float("nan"), float("inf")
x = Tensor([[1.5, -2.0, nan, 3.0, 0.0, -0.0, 7.25], [inf, -inf, 1e30, -1e30, 2.0, 5.0, -3.5]])
for d in ("int", "uint", "char", "uchar", "long", "bool", "half"):
  x.cast(d).tolist(); x.half().cast(d).tolist()
i = Tensor([2**31 - 1, -2**31, 5, -7, 0, 1, 33], dtype="int")
for d in ("int", "uint", "char", "uchar", "long"):
  a = i.cast(d)
  (a + a * 3 - a).tolist(); (a << a).tolist(); (a >> a).tolist(); (~a).tolist(); a.max().tolist(); a.min().tolist()
  Tensor(a.uop.alu(Ops.IDIV, a.uop)).tolist(); Tensor(a.uop.alu(Ops.MOD, (a - 5).uop)).tolist()
  Tensor(a.uop.alu(Ops.IDIV, (a * 0 - 1).uop)).tolist()  # INT_MIN / -1
m = Tensor([True, False, True])
(m + m).tolist(); (m * m).tolist(); (m ^ m).tolist()
f = Tensor([[float(k % 13) - 6.5 for k in range(j, j + 37)] for j in range(19)])
(f.softmax() @ f.T).sum(axis=0).tolist(); f[:, ::-2].pad(((1, 2), (3, 0))).flip(0).max(axis=1).tolist()
f.exp().log().sqrt().sin().tolist(); (f / 0.0).tolist(); f.half().sum().tolist()
Tensor([1.0, 2.0, 3.0, 4.0, 5.0]).reshape(5, 1, 1).expand(5, 2**16, 2**15).reshape(-1)[2**31 + 3:2**31 + 40].tolist()
Tensor.ones(4100, 1025).sum(axis=1).tolist()  # big enough for CPU threads
print("clean")
"""

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dtype, low", [(dtypes.int32, -2**31), (dtypes.int64, -2**63)])
def test_the_smallest_int_divided_by_minus_one_wraps(device, dtype, low):
  x = Tensor([low, 7, -9, low + 1], dtype=dtype, device=device)
  assert (x // -1).tolist() == [low, -7, 9, -(low + 1)] and (x % -1).tolist() == [0, 0, 0, 0]

def test_cpu_kernels_have_no_undefined_behaviour(tmp_path):
  """Edge values of every op, every dtype, gated and threaded kernels, built with gcc's UB sanitizer: any undefined
  behaviour the C has (overflow, bad shifts, float->int out of range, division by zero) aborts the run."""
  sanitize = "-fsanitize=undefined,float-cast-overflow -fno-sanitize-recover=all"
  out = run_python(UB_PROGRAM, tmp_path, CC=f"cc {sanitize}", DEVICE="CPU", THREADS="2")
  assert out.returncode == 0 and out.stdout.strip().endswith("clean"), out.stdout

def test_two_threads_lower_and_run_new_kernels_at_once():
  def work(seed: int) -> list:
    out = []
    for i in range(6):  # a new constant each time: a new kernel, lowered, rendered and compiled here
      x = Tensor(rand_list((7, 13), seed * 100 + i))
      out.append(((x * (seed + i / 7) + 1).max(axis=1).tolist(), [max(f32(f32(v * f32(seed + i / 7)) + 1) for v in row)
                                                                   for row in x.tolist()]))
      for device in ("CUDA", "METAL"): tiny.render((x - (seed * 31 + i)).softmax(), device=device)
    return out
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    for results in pool.map(work, [3, 5, 8, 11]):
      for got, want in results: assert_close(got, want)

def test_a_node_no_render_rule_knows_is_named():
  bad = tiny.UOp(tiny.Ops.CONTIGUOUS, dtypes.float, (tiny.UOp.const(dtypes.float, 1.0),))
  with pytest.raises(NotImplementedError, match="CONTIGUOUS"): tiny.CPU.render("k", [bad], [])

def test_rules_that_undo_each_other_raise_instead_of_hanging():
  a, b = tiny.UPat.var("a"), tiny.UPat.var("b")
  swap = tiny.PatternMatcher([(tiny.UPat(tiny.Ops.ADD, src=(a, b)),
                               lambda a, b: tiny.UOp(tiny.Ops.ADD, a.dtype, (b, a)))])
  x, y = tiny.UOp.const(dtypes.int, 1), tiny.UOp(tiny.Ops.RANGE, dtypes.int, (tiny.UOp.const(dtypes.int, 3),), (0, "x"))
  with pytest.raises(RuntimeError, match="fixed point.*ADD"): tiny.graph_rewrite(x + y, swap)

# ------------------------------------------------------------------------------------------------------------------
# never a silent wrong answer: tiny copied into a project, a compile cache that can't hurt a run, C compiler flags
# without undefined behaviour, devices opened once, bounded memory, devices kept apart, settings that name themselves

def vendored(tmp_path: Path) -> Path:
  """tiny's three files copied into app/third_party/tiny_engine under tmp_path, as a project would vendor them."""
  pkg = tmp_path / "app" / "third_party" / "tiny_engine"
  pkg.mkdir(parents=True)
  for folder in (pkg.parent.parent, pkg.parent, pkg): (folder / "__init__.py").write_text("")
  for name in ("tiny.py", "cuda_rt.py", "metal_rt.py"): shutil.copy(HERE / name, pkg)
  return tmp_path

def test_tiny_copied_into_a_package_imports_its_own_runtimes(tmp_path):
  root = vendored(tmp_path)
  (root / "cuda_rt.py").write_text("raise ImportError('imported the cuda_rt.py of the current folder')\n")
  r = run_python("""
    import sys
    from app.third_party.tiny_engine import tiny
    from app.third_party.tiny_engine.tiny import Tensor
    print((Tensor([1.0, 2.0]) + 1).tolist(), Tensor([[1.0, 2.0], [3.0, 4.0]]).sum(axis=1).tolist())
    print([tiny.render(Tensor.empty(4, 4) * 2, device=d)[0].name for d in ("CUDA", "METAL")], tiny.Device.DEFAULT)
    print(sorted(m for m in sys.modules if m.endswith(("cuda_rt", "metal_rt"))))
  """, tmp_path, cwd=root, PYTHONPATH=str(root))
  values, names, modules = r.stdout.splitlines()
  assert values == "[2.0, 3.0] [3.0, 7.0]" and names.startswith("['E_4_4', 'E_4_4'] "), r.stdout
  assert "'cuda_rt'" not in modules and "'metal_rt'" not in modules, r.stdout

def test_a_runtime_that_fails_to_import_leaves_the_default_device_to_the_next(tmp_path):
  shutil.copy(HERE / "tiny.py", tmp_path)
  (tmp_path / "cuda_rt.py").write_text("raise SyntaxError('a broken runtime')\n")
  r = run_python("from tiny import Device, Tensor\nprint(Device.DEFAULT, (Tensor([1.0]) * 3).tolist())", tmp_path,
                 cwd=tmp_path, PYTHONPATH=str(tmp_path), DEVICE="")  # unset: tiny picks
  assert r.stdout in ("CPU [3.0]\n", "METAL [3.0]\n"), r.stdout


def test_a_top_level_tiny_loads_its_runtimes_from_its_own_folder(tmp_path):
  """Not a cuda_rt.py or metal_rt.py of the current folder, which sys.path searches first."""
  lib = tmp_path / "lib"
  lib.mkdir()
  for name in ("tiny.py", "cuda_rt.py", "metal_rt.py"): shutil.copy(HERE / name, lib)
  for name in ("cuda_rt", "metal_rt"): (tmp_path / f"{name}.py").write_text(f"raise ImportError('the current {name}')")
  r = run_python("""
    import os, tiny
    print([os.path.dirname(tiny.runtime(m).__file__) == os.path.dirname(tiny.__file__) \
for m in ("cuda_rt", "metal_rt")])
    print([tiny.render(tiny.Tensor.empty(4, 4) * 2, device=d)[0].name for d in ("CUDA", "METAL")])
  """, tmp_path, cwd=tmp_path, PYTHONPATH=str(lib))
  assert r.stdout == "[True, True]\n['E_4_4', 'E_4_4']\n", r.stdout
@needs_nvrtc
def test_a_cuda_compile_error_is_a_tiny_compile_error():
  gpu = object.__new__(cuda_rt.CUDADevice)  # NVRTC compiles for it with no GPU present
  gpu.arch, gpu.ptx, gpu.compiler_id = "sm_90", False, "nvrtc-sm_90-cubin"
  src = 'extern "C" __global__ void k(float* a) { a[0] = undefined_b; }'
  with pytest.raises(tiny.CompileError, match="undefined_b"):
    tiny.Compiled("CUDA", gpu).program(tiny.Program("k", src, [], (1,), (1,)))

# BEAM=n searches each new kernel's opts by timing them on the device, and keeps the program it found on disk

def test_beam_times_candidates_and_keeps_every_value(monkeypatch, capsys, tmp_path):
  monkeypatch.setenv("TINY_CACHE", str(tmp_path))  # nothing searched before
  timed = []
  real = tiny._time
  monkeypatch.setattr(tiny, "_time", lambda fn, prog, bufs: timed.append(prog.opts) or real(fn, prog, bufs))
  monkeypatch.setenv("BEAM", "2")
  monkeypatch.setenv("DEBUG", "2")
  x, w, v = rand_list((18, 45), 160), rand_list((45, 30), 161), rand_list((1002,), 162)
  assert_close(poisoned(lambda a, b: a @ b, x, w).tolist(), ref_matmul(x, w), rtol=1e-5, atol=1e-5)
  assert_close(poisoned(lambda a: a.softmax(-1), x).tolist(), ref_softmax(x, -1), rtol=1e-5, atol=1e-7)
  assert_close(poisoned(lambda a: a.sum(), v).tolist(), math.fsum(v), rtol=1e-5)
  assert len(set(timed)) > 10 and "" in timed  # many candidates, from no opts on
  lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("***")]
  assert any(re.search(r"GB/s\) ((upcast|unroll|thread) \d+:\d+ ?)+$", line) for line in lines), lines

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_every_opt_a_search_may_try_keeps_every_value(device):
  """Random chains of the opts BEAM picks from, on kernels of odd shapes: each lowers to a kernel that writes every
  output element (poisoned first) with the reference's value. On PYTHON, the GPU's threads and shared reductions."""
  rng = random.Random(170)
  x, w, v = rand_list((6, 36), 171), rand_list((36, 10), 172), rand_list((1002,), 173)
  programs = [(lambda a, b: a @ b, (x, w), ref_matmul(x, w)), (lambda a, b: a.softmax(-1), (x, w), ref_softmax(x, -1)),
              (lambda a, b: (a * 2).sum(-1, keepdim=True) + a, (x, w), ref_ew(operator.add, ref_reduce(
                lambda r: math.fsum(2 * e for e in r), x, -1, True), x)),
              (lambda a, b: a.max(), (v, w), max(v))]
  target = tiny.Device.target(device)
  for fn, inputs, want in programs:
    for trial in range(12):
      ts = [Tensor(i, device=device).realize() for i in inputs]
      item, = tiny.schedule([fn(*ts)])
      sink, opts = tiny.ranged(item.ast, target), ()
      for _ in range(rng.randint(1, 3)):
        if cands := tiny.candidates(sink, target):
          opt = rng.choice(cands)
          sink, opts = tiny.apply_opt(sink, opt), opts + (opt,)
      prog = tiny.finish(*tiny.launch_opts(sink, opts, target), item.ast, target)
      out = item.bufs[0]
      out.copyin(memoryview(struct.pack(f"{out.size}f", *[math.nan] * out.size)))
      tiny.Device[device].program(prog)(*[b.buf for b in item.bufs], global_size=prog.global_size,
                                        local_size=prog.local_size, wait=True)
      got = list(struct.unpack(f"{out.size}f", out.copyout()))
      assert_close(got, flat(want) if isinstance(want, list) else [want], rtol=1e-5, atol=1e-5), (prog.opts, prog.src)

def test_a_searched_kernel_is_kept_on_disk(tmp_path):
  script = """
    import tiny
    from tiny import Tensor
    if PHASE == "second": tiny.beam = None  # a search now would fail: the first process's program must be read back
    print((Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.5]]) @ Tensor([[1.0], [2.0], [0.5]])).tolist())
  """
  for phase in ("first", "second"):
    r = run_python(f"PHASE = {phase!r}\n" + textwrap.dedent(script), tmp_path, DEVICE="CPU", BEAM="1")
    assert r.stdout == "[[6.5], [17.25]]\n", r.stdout

CACHE_SCRIPT = "from tiny import Tensor\nprint((Tensor([1.0, 2.0, 3.0]) * 7 + 0.25).tolist())"
DAMAGE = {  # an entry is the sha256 of its key and binary, then the binary
  "truncated": lambda entry: entry[:len(entry) // 2], "empty": lambda entry: b"",
  "one byte flipped": lambda entry: entry[:100] + bytes([entry[100] ^ 1]) + entry[101:],
  "without its hash": lambda entry: entry[32:],
  "stored under another key": lambda entry: hashlib.sha256(b"another key" + entry[32:]).digest() + entry[32:]}

@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_cache_entry_is_reported_once_and_rebuilt(tmp_path, damage):
  assert run_python(CACHE_SCRIPT, tmp_path, DEVICE="CPU").stdout == "[7.25, 14.25, 21.25]\n"
  entry, = (tmp_path / "cache").glob("*.bin")  # the compiled kernel (beside it: the lowered program, as text)
  good = entry.read_bytes()
  entry.write_bytes(DAMAGE[damage](good))
  r = run_python(CACHE_SCRIPT, tmp_path, DEVICE="CPU", DEBUG="1")
  assert r.stdout == f"the cached kernel {entry} is damaged: compiling E_3 again\n[7.25, 14.25, 21.25]\n", r.stdout
  assert entry.read_bytes() == good

def test_an_unusable_cache_folder_falls_back_with_one_warning(tmp_path):
  (tmp_path / "file").write_text("a file where the cache folder would go")
  r = run_python("from tiny import Tensor\nprint((Tensor([1.0, 2.0]) + 1).tolist(), (Tensor([4.0]) * 2).tolist())",
                 tmp_path, DEVICE="CPU", TINY_CACHE=str(tmp_path / "file" / "sub"))
  assert r.returncode == 0 and r.stdout.count("UserWarning") == 1 and "[2.0, 3.0] [8.0]" in r.stdout, r.stdout
  assert f"can't keep compiled kernels in {tmp_path / 'file' / 'sub'} (Not a directory)" in r.stdout, r.stdout


def test_a_cache_folder_that_goes_away_while_running_is_made_again(tmp_path):
  """Removed: made anew. An entry that can't be read (a folder in its place) is a miss. A file in the folder's place:
  replaced, with a warning."""
  r = run_python(f"""
    import hashlib, os, shutil, tiny
    from tiny import Tensor
    cache = {str(tmp_path / "cache")!r}
    print((Tensor([1.0, 2.0]) + 1).tolist())
    shutil.rmtree(cache)
    print((Tensor([1.0, 2.0]) * 3).tolist(), len(os.listdir(cache)))
    prog, = tiny.render(Tensor.empty(2, 3) - Tensor.empty(2, 3))
    key = f"{{tiny.Device['CPU'].runtime.compiler_id}}\\n{{prog.src}}".encode()
    os.makedirs(os.path.join(cache, hashlib.sha256(key).hexdigest() + ".bin"))
    print((Tensor([[1.0, 2.0, 3.0]] * 2) - Tensor([[0.5, 0.5, 0.5]] * 2)).tolist())
    shutil.rmtree(cache)
    open(cache, "w").close()
    print((Tensor([1.0, 2.0]) * 5).tolist())
  """, tmp_path, DEVICE="CPU")
  lines = [line for line in r.stdout.splitlines() if line.startswith("[")]
  assert r.returncode == 0 and lines == ["[2.0, 3.0]", "[3.0, 6.0] 2", "[[0.5, 1.5, 2.5], [0.5, 1.5, 2.5]]",
                                         "[5.0, 10.0]"], r.stdout  # (2: the program and its binary)
  assert "can't keep a compiled kernel in" in r.stdout and "can't keep compiled kernels in" in r.stdout, r.stdout

def test_a_cache_hit_writes_nothing_into_the_cache_folder(tmp_path):
  cache = tmp_path / "cache"
  run_python(CACHE_SCRIPT, tmp_path, DEVICE="CPU")
  before = (cache.stat().st_mtime_ns, sorted(cache.iterdir()))
  assert run_python(CACHE_SCRIPT, tmp_path, DEVICE="CPU").stdout == "[7.25, 14.25, 21.25]\n"
  assert (cache.stat().st_mtime_ns, sorted(cache.iterdir())) == before  # no file made in it, not even a deleted one

FAKE_CC = """#!/bin/sh
case "$*" in
  *--version*) echo "fakecc $FAKE_VERSION";;
  *-dM*) echo "#define $FAKE_TARGET 1";;
esac
"""

def test_the_cache_key_names_the_compilers_file_and_version_and_the_real_target(monkeypatch, tmp_path):
  for name in ("cc", "cc2"):
    (tmp_path / name).write_text(FAKE_CC)
    (tmp_path / name).chmod(0o755)
  def key(cc, version, target):
    for var, value in (("CC", str(tmp_path / cc)), ("FAKE_VERSION", version), ("FAKE_TARGET", target)):
      monkeypatch.setenv(var, value)
    return tiny.CPURuntime().compiler_id
  keys = [key("cc", "1", "__AVX2__"), key("cc", "1", "__AVX512F__"), key("cc", "2", "__AVX2__"),
          key("cc2", "1", "__AVX2__")]
  assert len(set(keys)) == 4 and keys[0] == key("cc", "1", "__AVX2__")  # -march=native in each: the target differs

# ------------------------------------------------------------------------------------------------------------------
# the CPU's vector width: what its compiler targets, and the same values at every width

AVX512 = "#define __AVX512F__ 1\n#define __AVX2__ 1\n#define __AVX__ 1\n#define __SSE2__ 1\n"
@pytest.mark.parametrize("macros, width", [(AVX512, 16), (AVX512.split("\n", 1)[1], 8), ("#define __AVX__ 1\n", 8),
                                           ("#define __SSE2__ 1\n", 4), ("#define __ARM_NEON 1\n", 4), ("", 4)],
                         ids=["avx512", "avx2", "avx", "sse2", "neon", "none"])
def test_the_cpu_vector_width_comes_from_the_compilers_macros(macros, width):
  assert tiny.vector_width(macros) == width

@pytest.mark.parametrize("macro, width", [("__AVX512F__", 16), ("__AVX__", 8), ("__SSE2__", 4)])
def test_the_cpu_device_lowers_at_the_width_its_compiler_targets(monkeypatch, tmp_path, macro, width):
  (tmp_path / "cc").write_text(FAKE_CC)
  (tmp_path / "cc").chmod(0o755)
  for var, value in (("CC", str(tmp_path / "cc")), ("FAKE_VERSION", "1"), ("FAKE_TARGET", macro)):
    monkeypatch.setenv(var, value)
  monkeypatch.setattr(tiny.Device, "opened", {})  # a CPU device opened anew, with this compiler
  assert tiny.Device.target("CPU").width == width and tiny.Device.target("CUDA").width == 4

def test_a_program_on_disk_is_lowered_again_at_another_width(monkeypatch, tmp_path):
  """A cache shared by machines of different widths: the width is part of a lowered program's key."""
  monkeypatch.setenv("TINY_CACHE", str(tmp_path))
  item, = tiny.schedule([Tensor.empty(64, device="CPU") + 1])
  target = tiny.Device.target
  for width in (16, 4, 16):
    monkeypatch.setattr(tiny.Device, "target", lambda name: target(name)._replace(width=width))
    monkeypatch.setattr(tiny, "program_cache", {})
    assert f"float{width} " in tiny.to_program(item.ast, "CPU").src
  assert len(list(tmp_path.glob("*.json"))) == 2

def test_cpu_buffers_start_at_a_64_byte_boundary():  # where a float16 access may assume one
  assert all(ctypes.addressof(tiny.Device["CPU"].runtime.alloc(n)) % 64 == 0 for n in (0, 1, 100, 4099, 2**20))

@pytest.fixture(params=[4, 8, 16], ids=lambda w: f"width{w}")
def cpu_width(request, monkeypatch) -> int:
  """CPU kernels lowered at this width, whatever this CPU's own: a compiler splits a vector wider than its registers,
  so every width compiles and runs on every machine, and each is checked on each."""
  target = tiny.Device.target
  monkeypatch.setattr(tiny.Device, "target",
                      lambda name: target(name)._replace(width=request.param) if name == "CPU" else target(name))
  monkeypatch.setattr(tiny, "program_cache", {})  # what was lowered at another width is not this
  monkeypatch.setattr(tiny, "plans", tiny.Bounded())  # nor what was planned (a matmul's packed tiles)
  return request.param

def poisoned(fn, *xs, device="CPU") -> Tensor:
  """fn of tensors of xs, into an output buffer that held NaNs: an element a kernel forgets to write shows."""
  ts = [Tensor(x, device=device).realize() for x in xs]
  out = fn(*ts)
  poison = Tensor.full(out.shape, math.nan, device=device).realize()
  del poison
  gc.collect()
  return out

@functools.cache
def big(n:int, seed:int) -> list[float]: return rand_list((n,), seed)

# less than a vector, tails of every width, and rows (a row broadcast down them) that only a narrower vector fills
@pytest.mark.parametrize("shape", [(5,), (37,), (1003,), (1_000_003,), (7, 1000), (3, 36)])
def test_elementwise_at_every_cpu_width(cpu_width, shape):
  a = big(shape[0], 140) if len(shape) == 1 else rand_list(shape, 140)
  b = big(shape[-1], 141)
  out = poisoned(lambda x, y: x * y + x.maximum(y) - 1, a, b)
  lanes = cpu_width if len(shape) == 1 else max(w for w in (4, 8, 16) if w <= cpu_width and shape[-1] % w == 0)
  assert shape[-1] < lanes or f"float{lanes} " in tiny.render(out)[0].src
  want = [f32(x * y) + max(x, y) - 1 for x, y in zip(flat(a), b * (math.prod(shape) // len(b)))]
  assert_close(flat(out.tolist()), want, atol=1e-5)

# split in two, odd rows, four vectors, rows a narrower vector fills
@pytest.mark.parametrize("shape", [(1_000_003,), (7, 4099), (3, 1024), (5, 96), (3, 1000)])
def test_sum_and_max_at_every_cpu_width(cpu_width, shape):
  x = big(shape[0], 142) if len(shape) == 1 else rand_list(shape, 142)
  assert_close(poisoned(lambda t: t.sum(axis=-1), x).tolist(), ref_reduce(math.fsum, x, -1), rtol=1e-4, atol=1e-4)
  assert poisoned(lambda t: t.max(axis=-1), x).tolist() == ref_reduce(max, x, -1)

@pytest.mark.parametrize("value", [0.0, 1.5])
def test_a_reduce_over_rows_of_padding_alone_at_every_cpu_width(cpu_width, value):  # a vector load that's never taken
  x = rand_list((1, 16), 172)
  rows = x + [[value] * 16] * 3
  for fn, ref in ((lambda t: t.max(-1), max), (lambda t: t.min(-1), min), (lambda t: t.sum(-1), math.fsum)):
    assert_close(poisoned(lambda t: fn(t.pad(((0, 3), (0, 0)), value=value)), x).tolist(), [ref(r) for r in rows],
                 rtol=1e-6, atol=1e-6)

@pytest.mark.parametrize("m, k, n", [(37, 29, 71), (20, 33, 128), (8, 64, 64)])  # odd; a register tile at any width
def test_matmul_at_every_cpu_width(cpu_width, m, k, n):
  a, b = rand_list((m, k), 143), rand_list((k, n), 144)
  assert_close(poisoned(lambda x, y: x @ y, a, b).tolist(), matmul2d(a, b), rtol=1e-4, atol=1e-4)

def test_a_cpu_matmul_runs_its_rows_inside_its_columns_on_threads(cpu_width, monkeypatch):
  """Each step of the reduce reads a tile of b wider than a's, so the rows loop inside the columns (b's tile stays in
  cache); the threads split the columns, or where 3 tiles of them don't (width 16), the rows inside them."""
  monkeypatch.setattr(tiny, "threads", lambda: 2)
  a, b = rand_list((72, 70), 170), rand_list((70, 192), 171)
  progs = tiny.render(Tensor(a, device="CPU") @ Tensor(b, device="CPU"))
  assert "global" in progs[-1].opts and "thread" in progs[-1].opts, progs[-1].opts
  assert_close(poisoned(lambda x, y: x @ y, a, b).tolist(), matmul2d(a, b), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("shape", [(37,), (5, 37), (3, 1024)])
def test_softmax_at_every_cpu_width(cpu_width, shape):
  x = rand_list(shape, 145, -9.0, 9.0)
  assert_close(poisoned(lambda t: t.softmax(-1), x).tolist(), ref_softmax(x, -1), rtol=1e-5, atol=1e-7)

@pytest.fixture
def small_streams(cpu_width, monkeypatch, tmp_path):
  """Outputs of 1 KB or more written past the cache (as ones of 16 MB are), lowered afresh: the disk cache doesn't
  know the threshold."""
  monkeypatch.setattr(tiny, "STREAM_BYTES", 1024)
  monkeypatch.setenv("TINY_CACHE", str(tmp_path))
  if not tiny.Device.target("CPU").streams: pytest.skip("this CPU's compiler targets no x86 stores past the cache")
  return cpu_width

STREAMS = {4: "_mm_stream_ps", 8: "_mm256_stream_ps", 16: "_mm512_stream_ps"}

@pytest.mark.parametrize("n", [1003, 4099])
def test_big_outputs_are_written_past_the_cache_at_every_cpu_width(small_streams, n):
  """Whole vectors stream and the tail is stored as before; the fence ends the kernel. A softmax row's exps, which the
  kernel reads back, go to a row on the stack so its output streams too; a row too long for the stack keeps them in
  the output, stored in the cache."""
  wider = small_streams > tiny.Device["CPU"].runtime.width  # a vector wider than the CPU's stores is stored as before
  a, b = big(n, 167), big(n, 168)
  out = poisoned(lambda x, y: x * y + x, a, b)
  src = tiny.render(out)[0].src
  if wider: assert "_stream_" not in src, src
  else: assert STREAMS[small_streams] in src and src.rstrip().endswith("_mm_sfence();\n}"), src
  assert_close(out.tolist(), [f32(x * y) + x for x, y in zip(a, b)], atol=1e-6)
  x = rand_list((4, 1024), 170, -9.0, 9.0)
  for row_bytes, streams in ((2**16, True), (2048, False)):
    tiny.program_cache.clear()
    with pytest.MonkeyPatch.context() as m:
      m.setattr(tiny, "ROW_BYTES", row_bytes)
      m.setenv("NOCACHE", "1")  # (the disk cache doesn't know the row's bound either)
      row = poisoned(lambda t: t.softmax(-1), x)
      src = tiny.render(row)[0].src
    assert ("_stream_" in src) == (streams and not wider) and ("temp0[1024]" in src) == streams, src
    assert_close(row.tolist(), ref_softmax(x, -1), rtol=1e-5, atol=1e-7)

@pytest.mark.parametrize("shape, axes", [((64, 16), (-1,)), ((5, 16, 37), (1, 2)), ((3, 7, 36), (-1,))])
def test_row_programs_past_the_cache_keep_their_rows_on_the_stack(small_streams, shape, axes):
  """A row of one vector (its load's address doesn't move along the rows: it still runs in its row), a row over two
  axes, and rows of a 3-D tensor."""
  x = rand_list(shape, 175, -9.0, 9.0)
  def softmax(t):
    e = (t - t.max(axes, keepdim=True)).exp()
    return e / e.sum(axes, keepdim=True)
  out = poisoned(softmax, x)
  assert "temp0[" in tiny.render(out)[0].src
  rows = (math.prod(shape[:-len(axes)]), math.prod(shape[-len(axes):]))
  assert_close(out.tolist(), ref_reshape(ref_softmax(ref_reshape(x, rows), -1), shape), rtol=1e-5, atol=1e-7)

def test_a_row_program_whose_rows_split_across_cores_leave_a_loop_of_one(small_streams, monkeypatch):
  """Rows (13, 13, 2) over two cores: the dim of 2 splits into a loop of one and the core's index. An address that
  adds the loop of one is the core's alone, as the row's loads have it, so the next row's fetch stays in the row."""
  target = tiny.Device.target
  monkeypatch.setattr(tiny.Device, "target", lambda name: target(name)._replace(cores=2))
  x = rand_list((13, 13, 33, 2), 178, -3.0, 3.0)
  out = poisoned(lambda t: t.permute(1, 0, 3, 2).contiguous().flip(3).softmax(-1), x)
  want = ref_softmax(ref_flip(ref_permute(x, (1, 0, 3, 2)), (3,)), -1)
  assert_close(out.tolist(), want, rtol=1e-5, atol=1e-7)

def test_a_row_kept_on_the_stack_keeps_its_rows_apart(small_streams):
  """Rows that read a vector they share would be lanes of one loop (each load of w feeding 4 rows), but the stack
  holds one row at a time: they stay a loop."""
  x, w = rand_list((100, 53), 176, -3.0, 3.0), rand_list((1, 53), 177, -3.0, 3.0)
  def fn(t, v):
    s = (t * v).sigmoid()
    return s - s.max(-1, keepdim=True)
  out = poisoned(fn, x, w)
  s = [[1 / (1 + math.exp(-a * b)) for a, b in zip(row, w[0])] for row in x]
  assert_close(out.tolist(), [[v - max(row) for v in row] for row in s], rtol=1e-5, atol=1e-6)

def test_outputs_stream_only_where_they_are_big_and_the_cpu_has_the_stores(monkeypatch):
  """16 MB of output streams, a byte less doesn't; a reduce's scalar stores don't; nor where the compiler targets
  no x86 (NEON); nor on GPUs."""
  if not tiny.Device.target("CPU").streams: pytest.skip("this CPU's compiler targets no x86 stores past the cache")
  def src(n, fn=lambda t: t + 1, device="CPU"): return tiny.render(fn(Tensor.empty(n, device=device)))[0].src
  assert "_stream_" in src(2**22) and "_stream_" not in src(2**22 - 16)
  assert "_stream_" not in src(2**22, lambda t: (t + 1).sum())
  assert "_stream_" not in src(2**22, device="CUDA")
  target = tiny.Device.target
  monkeypatch.setattr(tiny.Device, "target", lambda name: target(name)._replace(streams=0))
  monkeypatch.setattr(tiny, "program_cache", {})
  assert "_stream_" not in src(2**22 + 16)

def test_a_16_mb_output_written_past_the_cache_holds_every_value():
  n = 2**22 + 5  # a tail past the last whole vector
  a = big(n, 171)
  out = poisoned(lambda x: x * 2 + 1, a)
  assert "_stream_" in tiny.render(out)[0].src or not tiny.Device.target("CPU").streams
  assert out.tolist() == [f32(v * 2 + 1) for v in a]

def test_exp_and_log_at_every_cpu_width(cpu_width):
  x = rand_list((1003,), 146, -20.0, 20.0)  # exp(x) is exp2(x*log2(e)): the product's rounding, times |x*log2(e)|
  assert_close(poisoned(Tensor.exp, x).tolist(), [math.exp(v) for v in x], rtol=4e-6, atol=0)
  y = [abs(v) + 1e-30 for v in x]
  assert_close(poisoned(Tensor.log, y).tolist(), [math.log(f32(v)) for v in y], rtol=1e-6, atol=1e-7)

def test_ints_and_selects_at_every_cpu_width(cpu_width):
  i, j, x = rand_ints((1003,), 147, -2**31, 2**31 - 1), rand_ints((1003,), 148, -9, 40), rand_list((1003,), 149)
  def wrap(v): return (v + 2**31) % 2**32 - 2**31  # int32 arithmetic wraps; a shift past the width shifts all out
  want = [wrap(a * 3 + (a >> 2) - (a << b if 0 <= b < 32 else 0)) for a, b in zip(i, j)]
  assert poisoned(lambda a, b: a * 3 + (a >> 2) - (a << b), i, j).tolist() == want
  got = poisoned(lambda a, b, t: (a > b).where(t * 2, -t) + (t < 0).where(1.0, t.cast(dtypes.int)), i, j, x)
  assert_close(got.tolist(), [(2 * v if a > b else -v) + (1.0 if v < 0 else int(v)) for a, b, v in zip(i, j, x)])

def test_vector_lanes_beside_lane_by_lane_work_at_every_cpu_width(cpu_width):
  """Lanes computed as vectors meet lanes computed one by one: a comparison's mask stored as bools and cast to int, a
  float-to-int cast (lane by lane: its guard), a transposed read (a load a lane) in vector math, and a sum of it."""
  x, y = rand_list((37, 48), 150, -3.0, 3.0), rand_list((48, 37), 151, -3.0, 3.0)
  yt = [list(col) for col in zip(*y)]
  lt = [[u < v for u, v in zip(r, s)] for r, s in zip(x, yt)]
  assert poisoned(lambda a, b: a < b.T, x, y).tolist() == lt
  assert poisoned(lambda a, b: (a < b.T).cast(dtypes.long), x, y).tolist() == [[int(v) for v in r] for r in lt]
  got = poisoned(lambda a, b: (a < b.T).cast(dtypes.int) * 3 + (a * 4).cast(dtypes.int), x, y)
  assert got.tolist() == [[3 * (u < v) + int(f32(u * 4)) for u, v in zip(r, s)] for r, s in zip(x, yt)]
  assert_close(poisoned(lambda a, b: a * b.T + a, x, y).tolist(),
               [[f32(u * v) + u for u, v in zip(r, s)] for r, s in zip(x, yt)], atol=1e-6)
  assert_close(poisoned(lambda a, b: (a * b.T).sum(axis=1), x, y).tolist(),
               [math.fsum(u * v for u, v in zip(r, s)) for r, s in zip(x, yt)], rtol=1e-5, atol=1e-5)

def test_cc_may_carry_arguments(monkeypatch, tmp_path):
  monkeypatch.setenv("CC", f"{os.getenv('CC', 'cc')} -DANSWER=42")
  monkeypatch.setenv("TINY_CACHE", str(tmp_path))
  fn = tiny.Compiled("CPU", tiny.CPURuntime()).program(
    tiny.Program("answer", "void answer(float* restrict o) { o[0] = ANSWER; }", [], (1,), (1,)))
  out = (ctypes.c_float * 1)()
  fn(out)
  assert out[0] == 42.0

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_int_overflow_wraps(device):  # undefined in C, where gcc folds (x+1 > x) to true
  t = Tensor([2**31 - 1, 5], device=device)
  assert ((t + 1) > t).tolist() == [False, True] and (t + 1).tolist() == [-2**31, 6]

R, S2 = slice(None, None, -1), slice(None, None, -2)
REVERSED = [  # (shape, view, reduce axis): backwards and strided inner loops at odd sizes
  ((17, 2), (slice(None), R), None),  # gcc 12 -O2 re-vectorizing this sum got 833 for arange(34), not 561
  ((17, 2), (R,), 0), ((17, 2), (R, R), 1),
  ((5, 7, 3), (slice(None), S2), 1), ((5, 7, 3), (R, slice(None), R), 2), ((5, 7, 3), (..., R), None),
  ((5, 7, 3), (S2, R), (0, 2)), ((33,), (R,), None), ((33,), (slice(None, None, -3),), 0), ((33,), (S2,), None),
]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("shape, key, axis", REVERSED, ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(REVERSED)])
def test_reversed_and_strided_reductions_at_odd_sizes(device, op, shape, key, axis):
  x = build(shape, lambda idx: float(sum((i + 1) * 10 ** d for d, i in enumerate(idx)) % 97))  # exact in float32
  want = ref_reduce({"sum": math.fsum, "max": max}[op], ref_getitem(x, key), axis)
  assert getattr(Tensor(x, device=device)[key], op)(axis=axis).tolist() == want

def test_two_threads_opening_one_device_open_it_once(monkeypatch):
  opened, start = [], threading.Barrier(2)
  def slow_runtime():
    opened.append(None)
    time.sleep(0.05)  # the second thread arrives while the first is still opening
    return tiny.Emulator()
  devices = tiny._Device()
  monkeypatch.setitem(devices.kinds, "PYTHON", tiny.DeviceKind(tiny.CUDA, slow_runtime))
  def get(_):
    start.wait()
    return devices["PYTHON"]
  with concurrent.futures.ThreadPoolExecutor(2) as pool: a, b = pool.map(get, range(2))
  assert a is b and len(opened) == 1

def test_freed_buffers_past_lru_mb_are_freed_least_recently_freed_first(monkeypatch):
  monkeypatch.setenv("LRU_MB", "1")
  runtime, freed = object.__new__(tiny.CPURuntime), []
  runtime.free = freed.append
  dev = tiny.Compiled("CPU", runtime)
  a, b, c = dev.alloc(400_000), dev.alloc(500_000), dev.alloc(300_000)
  dev.free(a, 400_000)
  dev.free(b, 500_000)
  assert freed == []  # 900 KB kept
  dev.free(c, 300_000)  # 1.2 MB is past 1 MiB: a, freed longest ago, goes
  assert len(freed) == 1 and freed[0] is a and dev.alloc(500_000) is b and dev.alloc(300_000) is c

def test_lru_0_keeps_no_freed_buffer(monkeypatch):
  monkeypatch.setenv("LRU", "0")
  runtime, freed = object.__new__(tiny.CPURuntime), []
  runtime.free = freed.append
  dev = tiny.Compiled("CPU", runtime)
  buf = dev.alloc(64)
  dev.free(buf, 64)
  assert len(freed) == 1 and freed[0] is buf

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the memory maps in /proc")

@needs_proc
def test_dropped_tensors_leave_at_most_lru_mb_behind(tmp_path):
  r = run_python("""
    import array, gc
    from tiny import Tensor
    def rss_mb(): return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) // 1024
    zeros, before = bytes(4 * 2**19), rss_mb()
    for i in range(1000):  # 1 to 2 MB each, each its own size
      Tensor(array.array("f", zeros[:4 * (2**18 + 262 * i)])).realize()
    gc.collect()
    print(rss_mb() - before)
  """, tmp_path, DEVICE="CPU", LRU_MB="64")
  assert int(r.stdout) < 256, r.stdout  # 1.5 GB went through; without a bound it all stays

@needs_proc
def test_loaded_programs_stay_under_lru_programs_and_a_held_one_keeps_working(tmp_path):
  r = run_python("""
    import tiny
    from tiny import Tensor
    held = tiny.RawKernel("answer", "void answer(float* restrict o) { o[0] = 42; }", device="CPU")
    for k in range(12): assert (Tensor([1.0, 2.0]) * (k + 0.5)).tolist() == [k + 0.5, 2 * k + 1]
    out = Tensor.empty(1)
    held(out)
    libraries = {l.split()[5] for l in open("/proc/self/maps") if tiny.scratch() in l}
    print(len(tiny.Device["CPU"].programs), len(libraries), out.tolist())
  """, tmp_path, DEVICE="CPU", LRU_PROGRAMS="4")
  assert r.stdout == "4 5 [42.0]\n", r.stdout  # 4 in the cache, and the one the RawKernel holds

@pytest.mark.parametrize("first", ["CPU", "PYTHON"])
def test_realize_runs_each_tensor_on_its_own_device(first):
  x, y = rand_list((5,), 120), rand_list((7,), 121)
  a, b = Tensor(x, device="CPU") * 2, Tensor(y, device="PYTHON") + 1
  Tensor.realize(*((a, b) if first == "CPU" else (b, a)))
  assert a.buffer().device == "CPU" and b.buffer().device == "PYTHON"
  assert a.tolist() == [2 * v for v in x] and b.tolist() == [f32(v + 1) for v in y]

def run_uops(uops: list, *bufs: bytearray) -> list[bytearray]:
  """Runs hand-built linear UOps on the emulator, one thread."""
  tiny.Device["PYTHON"].program(tiny.Program("hand_built", "", uops, (1,), (1,)))(
    *bufs, global_size=(1,), local_size=(1,))
  return list(bufs)

def test_an_emulated_access_past_a_buffers_whole_vectors_raises_naming_the_kernel():
  out = tiny.UOp(tiny.Ops.PARAM, dtypes.float, (), tiny.Param(0, 5))  # 5 floats, whose allocation holds 16
  for at in (16, -1):
    store = tiny.UOp(tiny.Ops.STORE, None, (out, tiny.UOp.const(dtypes.int, at), tiny.UOp.const(dtypes.float, 1.0)))
    with pytest.raises(IndexError, match=f"hand_built: store at {at} is outside a buffer of 5"):
      run_uops([out, store.src[1], store.src[2], store], bytearray(128))  # 128 bytes: checked against 5, not these

def test_emulated_lanes_past_the_logical_end_load_nan_and_store_nothing():
  out, src = [tiny.UOp(tiny.Ops.PARAM, dtypes.float, (), tiny.Param(slot, 5)) for slot in (0, 1)]
  four = tiny.UOp.const(dtypes.int, 4)
  load = tiny.UOp(tiny.Ops.LOAD, dtypes.float.vec(4), (src, four))
  store = tiny.UOp(tiny.Ops.STORE, None, (out, tiny.UOp.const(dtypes.int, 0), load))
  tail = tiny.UOp(tiny.Ops.STORE, None, (out, four, load))  # its lanes 1..3 fall in the padding
  o, _ = run_uops([out, src, four, load, store.src[1], store, tail], bytearray(32),
                  bytearray(struct.pack("8f", 0, 1, 2, 3, 4, 7, 7, 7)))  # stale floats in the padding
  got = struct.unpack("8f", o)
  assert got[0] == 4.0 and all(math.isnan(v) for v in got[1:4]) and got[4] == 4.0 and got[5:] == (0.0,) * 3

@pytest.mark.usefixtures("gpu_lowering")
@pytest.mark.parametrize("shape", [(5,), (1003,), (3, 7)])
def test_emulated_ops_at_sizes_that_are_not_whole_float4s(shape):
  x, y = rand_list(shape, 122), rand_list(shape, 123)
  tx, ty = emulated(x, y)
  assert_close((tx * ty + 1).tolist(), ref_ew(lambda a, b: a * b + 1, x, y), rtol=1e-5, atol=1e-5)
  assert_close(tx.sum(axis=-1).tolist(), ref_reduce(math.fsum, x, -1), rtol=1e-5, atol=1e-5)
  assert tx.max().tolist() == max(flat(x)) and tx.flip(-1).tolist() == ref_getitem(x, (..., R))

def test_a_compiler_that_writes_nothing_is_named(tmp_path):
  r = run_python("""
    import tiny
    from tiny import Tensor
    try: (Tensor([1.0, 2.0]) + 1).realize()
    except tiny.CompileError as e: print("CompileError:", e)
  """, tmp_path, CC="/bin/true", DEVICE="CPU")
  assert r.stdout.startswith("CompileError: /bin/true exited with success but produced no output"), r.stdout
  assert "/tmp" not in r.stdout and "kernel.so" not in r.stdout, r.stdout  # no deleted temp file named

BAD_SETTINGS = [("THREADS", "abc", "at least 1"), ("THREADS", "0", "at least 1"), ("DEBUG", "x", "at least 0"),
                ("NOCACHE", "yes", "at least 0"), ("LRU_MB", "lots", "at least 0"), ("LRU_PROGRAMS", "0", "at least 1")]

@pytest.mark.parametrize("var, value, accepted", BAD_SETTINGS, ids=[f"{v}={x}" for v, x, _ in BAD_SETTINGS])
def test_a_bad_setting_names_the_variable_the_value_and_what_is_accepted(tmp_path, var, value, accepted):
  r = run_python("""
    import tiny
    print("imported")
    try: (tiny.Tensor([1.0, 2.0]) + 1).realize()
    except ValueError as e: print("ValueError:", e)
  """, tmp_path, DEVICE="CPU", **{var: value})
  assert r.stdout == f"imported\nValueError: {var}={value!r}: expected a whole number, {accepted}\n", r.stdout

# ------------------------------------------------------------------------------------------------------------------
# Python off the path: a graph of a structure seen before reuses its plan (no scheduling, no lowering), and TinyJit
# replays captured kernels on new inputs

def test_a_node_built_twice_is_one_object_and_float_keys_stay_apart():
  x = tiny.UOp(tiny.Ops.CONST, dtypes.float, (), 1.5)
  assert tiny.UOp(tiny.Ops.ADD, dtypes.float, (x, x)) is tiny.UOp(tiny.Ops.ADD, dtypes.float, (x, x))
  zeros = [tiny.UOp.const(dtypes.float, v) for v in (0.0, -0.0, math.nan)]
  assert len({id(z) for z in zeros}) == 3 and tiny.UOp.const(dtypes.float, math.nan) is zeros[2]
  assert [math.copysign(1, z.arg) for z in zeros[:2]] == [1, -1]

def test_a_node_nothing_holds_leaves_the_table():
  before = len(tiny.UOpMeta.nodes)
  u = tiny.UOp(tiny.Ops.CONST, dtypes.int, (), 987_654_321)
  assert len(tiny.UOpMeta.nodes) == before + 1
  del u
  assert len(tiny.UOpMeta.nodes) == before

def test_threads_building_the_same_new_nodes_get_one_object():
  interval = sys.getswitchinterval()
  sys.setswitchinterval(1e-6)  # threads switch as often as they can: a race in the table shows
  try:
    start = threading.Barrier(4)
    def build(_):
      start.wait()
      a = tiny.UOp(tiny.Ops.CONST, dtypes.int, (), 123_456)
      return [a] + [a := tiny.UOp(tiny.Ops.ADD, dtypes.int, (a, tiny.UOp.const(dtypes.int, i))) for i in range(3000)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool: chains = list(pool.map(build, range(4)))
  finally: sys.setswitchinterval(interval)
  for chain in chains[1:]: assert all(u is v for u, v in zip(chains[0], chain))

def test_same_structure_reuses_its_plan_with_new_data(monkeypatch):
  planned = []
  monkeypatch.setattr(tiny, "plan", lambda key, nodes, plan=tiny.plan: planned.append(key) or plan(key, nodes))
  got, want = [], []
  for seed in range(4):
    x, y, z = rand_list((7, 33), seed), rand_list((7, 33), seed + 10), rand_list((33,), seed + 20)
    a, b, c = Tensor(x), Tensor(y), Tensor(z)
    if seed == 1: before, lowered = len(planned), len(tiny.program_cache)
    got.append(((a * b + c).sum(1) * 2).tolist())
    want.append(ref_reduce(lambda v: 2 * math.fsum(v), ref_ew(lambda p, q, r: p * q + r, x, y, z), 1))
  assert len(planned) == before and len(tiny.program_cache) == lowered
  for g, w in zip(got, want): assert_close(g, w, rtol=1e-4)

def test_realize_allocates_only_what_a_kernel_uses():  # a 4 TB empty tensor beside a small result: nothing to compute
  huge, x = Tensor.empty(2**40), rand_list((5,), 6)
  small = Tensor(x) * 2
  Tensor.realize(huge, small)
  assert huge.realize().shape == (2**40,) and small.tolist() == [2 * v for v in x]

def test_a_plan_keeps_shared_buffers_apart_from_distinct_ones():
  x, y = rand_list((5, 3), 1), rand_list((5, 3), 2)
  a, b = Tensor(x), Tensor(y)
  assert_close((a * b + a).tolist(), ref_ew(lambda p, q: p * q + p, x, y))
  assert_close((a * a + a).tolist(), ref_ew(lambda p, q: p * p + p, x, y))  # one buffer in both places
  assert_close((b * a + b).tolist(), ref_ew(lambda p, q: q * p + q, x, y))

def test_constants_are_part_of_a_plan():  # a new value is a new kernel, compiled once: never the old value
  x = rand_list((9,), 3)
  a = Tensor(x)
  for k in (2.0, 3.0, 2.0, -0.0):
    assert_close((a * k + 1).tolist(), ref_ew(lambda p: p * k + 1, x))

def test_a_freed_result_is_computed_again():
  x, y = rand_list((6, 5), 4), rand_list((6, 5), 5)
  a, b = Tensor(x), Tensor(y)
  m = a * b
  out = (m + 1).exp()
  m.realize()  # out's graph now reads m's buffer
  assert_close(out.tolist(), ref_ew(lambda p, q: math.exp(p * q + 1), x, y), rtol=1e-5)
  del m
  gc.collect()  # m's buffer is gone: a graph of the same structure computes it again
  assert_close(((a * b + 1).exp()).tolist(), ref_ew(lambda p, q: math.exp(p * q + 1), x, y), rtol=1e-5)

def test_a_plan_with_a_split_reduction_binds_new_data():
  for seed in range(2):
    x = rand_list((40_000,), seed)
    assert_close(Tensor(x).sum().item(), math.fsum(x), rtol=1e-4, atol=1e-3)

@contextlib.contextmanager
def no_scheduling():
  """Anything that schedules or lowers raises inside."""
  def fail(*_): raise AssertionError("scheduled or lowered during a replay")
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(tiny, "schedule", fail)
    mp.setattr(tiny, "lower", fail)
    yield

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_jit_replays_on_new_data_every_call(device):
  jit = tiny.TinyJit(lambda a, b: (a * b + a).relu())
  outs, wants = [], []
  for seed in range(5):
    x, y = rand_list((3, 7), seed), rand_list((3, 7), seed + 50)
    a, b = Tensor(x, device=device), Tensor(y, device=device)
    if seed < 2: outs.append(jit(a, b))
    else:
      with no_scheduling(): outs.append(jit(a, b))
    wants.append(ref_ew(lambda p, q: max(p * q + p, 0.0), x, y))
  for got, want in zip(outs, wants): assert_close(got.tolist(), want)  # every output kept its own values

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_jit_several_kernels_and_outputs(device):
  @tiny.TinyJit
  def step(x, y):
    return x.softmax(-1), (x * y).sum(0), 7
  for seed in range(4):
    x, y = rand_list((5, 9), seed), rand_list((5, 9), seed + 1)
    a, b = Tensor(x, device=device), Tensor(y, device=device)
    if seed < 2: s, t, k = step(a, b)
    else:
      with no_scheduling(): s, t, k = step(a, b)
    assert k == 7
    assert_close(s.tolist(), ref_softmax(x, 1), rtol=1e-5)
    assert_close(t.tolist(), ref_reduce(math.fsum, ref_ew(operator.mul, x, y), 0), rtol=1e-5)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
# the inner jit's calls before the outer's: it captures or replays inside
@pytest.mark.parametrize("inner_first", [0, 2])
def test_a_jit_called_inside_another_is_captured_with_it(device, inner_first):
  inner = tiny.TinyJit(lambda x: x * 2 + 1)
  outer = tiny.TinyJit(lambda x, y: (inner(x) * y).sum(0))
  for seed in range(inner_first): inner(Tensor(rand_list((3, 5), seed), device=device))
  for seed in range(5):
    x, y = rand_list((3, 5), seed + 10), rand_list((3, 5), seed + 20)
    a, b = Tensor(x, device=device), Tensor(y, device=device)
    if seed < 2: got = outer(a, b)
    else:
      with no_scheduling(): got = outer(a, b)
    assert_close(got.tolist(), ref_reduce(math.fsum, ref_ew(lambda p, q: (2 * p + 1) * q, x, y), 0), rtol=1e-5)

@pytest.mark.parametrize("inner_first", [0, 2])
def test_a_jit_returning_what_a_jit_inside_returned_makes_new_outputs_each_call(inner_first):
  inner = tiny.TinyJit(lambda x: x * 2 + 1)
  outer = tiny.TinyJit(lambda x: inner(x))
  for seed in range(inner_first): inner(Tensor(rand_list((3, 5), seed)))
  xs = [rand_list((3, 5), seed + 10) for seed in range(5)]
  got = [outer(Tensor(x)) for x in xs]  # (each result kept, then read after the last call)
  for g, x in zip(got, xs): assert_close(g.tolist(), ref_ew(lambda p: 2 * p + 1, x), rtol=1e-6)

@pytest.mark.parametrize("inner_first", [0, 1])
def test_a_jit_inside_another_that_makes_python_data_replays_with_it(inner_first):  # (its data noted as its call's)
  inner = tiny.TinyJit(lambda x: x * Tensor([2.0, 3.0, 5.0]) + Tensor.rand(3))
  outer = tiny.TinyJit(lambda x, k: inner(x) * k)
  if inner_first: inner(Tensor([0.0, 0.0, 0.0]))
  for i, k in enumerate([1.0, 2.0, 1.0, 2.0, 1.0]):  # (two signatures: the inner one replays inside the second)
    Tensor.manual_seed(i)
    want = [(v * c + r) * k for v, c, r in zip([i, 1.0, -i], [2.0, 3.0, 5.0], Tensor.rand(3).tolist())]
    Tensor.manual_seed(i)
    assert_close(outer(Tensor([i, 1.0, -i]), k).tolist(), want, rtol=1e-6)

def test_a_jit_returning_its_argument_returns_that_tensor_as_the_call_does():  # (a later write shows in it)
  f = tiny.TinyJit(lambda x, y: {"x": x, "rows": x.reshape(3, 1), "sum": x + y})
  for i in range(4):
    x, y = Tensor([i, 2.0 * i, -1.0]), Tensor([1.0, 1.0, 1.0])
    out = f(x, y)
    x += 1
    assert out["x"] is x and out["x"].tolist() == [i + 1, 2.0 * i + 1, 0.0]
    assert out["rows"].tolist() == [[i + 1], [2.0 * i + 1], [0.0]] and out["sum"].tolist() == [i + 1, 2.0 * i + 1, 0.0]

@pytest.mark.parametrize("move", ["expand", "pad", "slice", "of a tensor not computed"])
def test_a_jit_given_a_view_reads_each_calls_values(move):  # (a view that isn't all of a buffer is given as a copy)
  moves = {"expand": lambda b: b.reshape(3, 1).expand(3, 4), "pad": lambda b: b.pad(((1, 2),)),
           "slice": lambda b: b[1:], "of a tensor not computed": lambda b: (b * 1)[::2]}
  refs = {"expand": lambda v: [[x] * 4 for x in v], "pad": lambda v: [0.0, *v, 0.0, 0.0], "slice": lambda v: v[1:],
          "of a tensor not computed": lambda v: v[::2]}
  f = tiny.TinyJit(lambda a: a * 2 + 1)
  for i in range(5):
    vals = [float(i), 10.0 + i, -1.5 * i]
    base = Tensor(vals) if move.startswith("of") else Tensor(vals).realize()
    assert f(moves[move](base)).tolist() == ref_ew(lambda x: 2 * x + 1, refs[move](vals))

def test_a_jit_given_a_weight_it_reads_runs_the_call_as_it_is():  # (a sharing its capture didn't see)
  state = Tensor([0.0, 0.0, 0.0]).contiguous().realize()
  def step(a):
    a += 1
    state.assign(state + 10)
    return state * 1
  f, want = tiny.TinyJit(step), [0.0, 0.0, 0.0]
  for i in range(3):
    want = [v + 10 for v in want]
    assert f(Tensor([1.0, 2.0, 3.0])).tolist() == want
  want = [v + 11 for v in want]  # (given the state itself: its own write, then the step's)
  assert f(state).tolist() == want and state.tolist() == want

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_jit_draws_rand_anew_each_call_as_the_function_would(device):  # inside another jit, too
  def noisy(x): return x * Tensor.rand(3, 5, device=device) + Tensor.rand(5, device=device)
  inner = tiny.TinyJit(noisy)
  outer = tiny.TinyJit(lambda x: inner(x) - Tensor.rand(3, 1, device=device))
  x = Tensor(rand_list((3, 5), 30), device=device)
  for fn, jit in ((noisy, tiny.TinyJit(noisy)), (lambda x: noisy(x) - Tensor.rand(3, 1, device=device), outer)):
    Tensor.manual_seed(11)
    want = [fn(x).tolist() for _ in range(5)]
    Tensor.manual_seed(11)
    assert [jit(x).tolist() for _ in range(5)] == want and want[3] != want[4]

def test_jit_reads_data_it_makes_as_captured_and_refuses_data_that_changes():
  x = rand_list((4,), 31)
  scale = tiny.TinyJit(lambda a: a * Tensor([1.0, -2.0, 3.0, 0.5]))  # the same data each call: read as captured
  for _ in range(4): assert scale(Tensor(x)).tolist() == [f32(v * k) for v, k in zip(x, (1.0, -2.0, 3.0, 0.5))]
  calls = []
  def count(a):
    calls.append(1)
    return a + Tensor([float(len(calls))] * 4)  # data from Python state: a replay would repeat the second call's
  counting = tiny.TinyJit(count)
  counting(Tensor(x))
  with pytest.raises(RuntimeError, match="changed between its first two calls"): counting(Tensor(x))
  # values read while captured raise: a replay would repeat the second call's (x * 2 for a sum of 3)
  for read in (lambda a: a * a.sum().item(), lambda a: Tensor(a.tolist()), lambda a: a.masked_select(a > 1)):
    with pytest.raises(RuntimeError, match="read a tensor's values"): tiny.TinyJit(read)(Tensor([1.0, 2.0]))

def test_jit_takes_tensors_in_lists_tuples_and_dicts_and_refuses_an_unhashable_argument():
  jit = tiny.TinyJit(lambda pair, scales: pair[0] * scales["by"] + pair[1][1])
  for seed in range(4):
    x, y, k = rand_list((2, 7), seed), rand_list((7,), seed + 40), rand_list((1,), seed + 60)
    pair, scales = [Tensor(x), (Tensor(rand_list((3,), seed + 80)), Tensor(y))], {"by": Tensor(k)}
    if seed < 2: got = jit(pair, scales)
    else:
      with no_scheduling(): got = jit(pair, scales)
    assert_close(got.tolist(), [[p * k[0] + q for p, q in zip(row, y)] for row in x])
  with pytest.raises(TypeError, match="set"): jit(pair, {"by": {2.5}})

def test_jit_returns_tensors_in_lists_tuples_and_dicts_made_anew():
  class Pair(NamedTuple):
    doubled: Tensor
    name: str
  jit = tiny.TinyJit(lambda a: {"sum": a + 1, "more": [a * 3, (a, 5)], "pair": Pair(a * 2, "p")})
  for seed in range(4):
    x = rand_list((5,), seed)
    if seed < 2: out = jit(Tensor(x))
    else:
      with no_scheduling(): out = jit(Tensor(x))
    assert out["sum"].tolist() == [f32(v + 1) for v in x] and out["more"][0].tolist() == [f32(v * 3) for v in x]
    assert out["more"][1][0].tolist() == x and out["more"][1][1] == 5 and isinstance(out["pair"], Pair)
    assert out["pair"].doubled.tolist() == [2 * v for v in x] and out["pair"].name == "p"

def test_jit_recaptures_for_a_new_shape_or_dtype():
  jit = tiny.TinyJit(lambda a: a * 2 + 1)
  for shape, dtype in [((7,), dtypes.float), ((9, 2), dtypes.float), ((7,), dtypes.int32), ((7,), dtypes.float)] * 3:
    x = rand_ints(shape, 7) if dtype == dtypes.int32 else rand_list(shape, 7)
    out = jit(Tensor(x, dtype=dtype))
    assert out.shape == shape and out.dtype == dtype
    assert_close(out.tolist(), ref_ew(lambda p: p * 2 + 1, x))
  assert len(jit.replays) == 3

def test_jit_other_arguments_are_part_of_the_signature():
  jit = tiny.TinyJit(lambda a, scale=1.0: a * scale)
  x = rand_list((6,), 8)
  for scale in (2.0, 3.0, 2.0, 3.0, 2.0, 3.0):
    assert_close(jit(Tensor(x), scale=scale).tolist(), ref_ew(lambda p: p * scale, x))

def test_jit_reads_weights_it_holds_and_inputs_that_share_a_buffer():
  w = Tensor(rand_list((4, 3), 9))
  jit = tiny.TinyJit(lambda x, y: x @ w + y)
  for seed in range(4):
    x = rand_list((2, 4), seed)
    a = Tensor(x)
    bias = Tensor(rand_list((2, 3), seed + 20))
    want = ref_ew(operator.add, ref_matmul(x, w.tolist()), bias.tolist())
    assert_close(jit(a, bias).tolist(), want, rtol=1e-5)
  x = rand_list((2, 3), 11)
  a = Tensor(x).reshape(2, 3)
  b = tiny.TinyJit(lambda p, q: p * q + p)
  for _ in range(3): assert_close(b(a, a).tolist(), ref_ew(lambda p: p * p + p, x))  # one buffer, both arguments

def test_jit_reads_each_call_the_part_of_a_buffer_it_is_given():  # (replays read the part the capture was given)
  x = rand_list((11, 3), 13)
  data = Tensor(x).realize()
  jit = tiny.TinyJit(lambda batch: (batch * 2).sum(1))
  for k in range(0, 9, 2): assert_close(jit(data[k:k + 2]).tolist(), [2 * sum(row) for row in x[k:k + 2]])
  for k in range(4): assert_close(jit(data.T[:, k:k + 2].T).tolist(), [2 * sum(row) for row in x[k:k + 2]])
  t = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
  flat = t.reshape(4)
  t += 1  # (flat: all of a write pending into t's buffer, which the function writes in place)
  def step(v):
    v += 1
    return v * 2
  bump = tiny.TinyJit(step)
  for k in range(4):
    assert bump(flat).tolist() == [2.0 * (v + k + 2) for v in (1, 2, 3, 4)]
    assert t.tolist() == [[k + 3.0, k + 4.0], [k + 5.0, k + 6.0]]

def test_jit_realizes_lazy_inputs_first():
  jit = tiny.TinyJit(lambda a: a + 1)
  x = rand_list((5,), 12)
  for _ in range(3): assert_close(jit(Tensor(x) * 2).tolist(), ref_ew(lambda p: 2 * p + 1, x))

def test_jit_refuses_to_read_an_earlier_output_it_was_not_given():
  state = [Tensor([1.0, 2.0, 3.0])]
  @tiny.TinyJit
  def step(x): return x + state[0]
  state[0] = step(Tensor([1.0, 1.0, 1.0]))  # the second call reads what the first returned, as a hidden input
  with pytest.raises(RuntimeError, match="earlier call returned"):
    step(Tensor([1.0, 1.0, 1.0]))


def test_jit_tells_apart_values_that_compare_equal():
  """True, 1 and 1.0 make constants of different dtypes, 0.0 and -0.0 of different signs: each its own replay."""
  jit = tiny.TinyJit(lambda x, s: x + s)
  flags, ints = Tensor([True, False, True]).realize(), Tensor([3, -4, 5]).realize()
  for _ in range(2): jit(flags, True)
  assert jit(flags, 1).tolist() == [2, 1, 2] and jit(flags, 1).dtype == flags.int().dtype
  for _ in range(2): jit(ints, 2.0)
  assert jit(ints, 2).tolist() == [5, -2, 7] and jit(ints, 2).dtype == dtypes.int32
  zeros = Tensor([-0.0, -0.0]).realize()
  for _ in range(2): jit(zeros, 0.0)
  assert [math.copysign(1, v) for v in jit(zeros, -0.0).tolist()] == [-1, -1]

def test_jit_computes_from_its_inputs_what_was_computed_before():
  """x + 1 was realized for another tensor and is still alive: the capture computes it from the function's input
  anyway, so a replay computes it from its own."""
  a = Tensor([1.0, 2.0, -3.5]).realize()
  h = a + 1
  kept = h * 2  # holds h's node, realized below
  h.realize()
  jit = tiny.TinyJit(lambda x: x + 1)
  for _ in range(2): assert jit(a).tolist() == [2.0, 3.0, -2.5]
  with no_scheduling(): assert jit(Tensor([10.0, 20.0, 0.5])).tolist() == [11.0, 21.0, 1.5]
  assert kept.tolist() == [4.0, 6.0, -5.0]

def test_jit_records_are_bounded_and_nan_finds_its_own():
  jit = tiny.TinyJit(lambda x, s: x * s)
  x = Tensor([1.0, -2.0, 3.0]).realize()
  for _ in range(50): assert all(math.isnan(v) for v in jit(x, math.nan).tolist())
  assert len(jit.first) == len(jit.replays) == 1
  tagged = tiny.TinyJit(lambda x, tag: x + 1)
  for tag in range(4200): tagged(x, tag)
  assert len(tagged.first) == 4096

def test_jit_replays_a_step_on_the_cpu_in_one_call_with_threaded_kernels():
  """A replay runs its kernels as one call into the pool's C (no launch from Python), threaded ones split across the
  workers, and still gives each call's own results, interleaved with eager work and after later calls."""
  w = Tensor(rand_list((67, 301), 3)).realize()
  @tiny.TinyJit
  def step(x, y):  # a matmul big enough for threads, a softmax, an elementwise kernel: several kernels
    return (x @ w).softmax(-1), (x * 2 + y).exp().sum(0)
  outs, wants = [], []
  for seed in range(6):
    x, y = rand_list((66, 67), seed), rand_list((66, 67), seed + 9)  # (66 rows: whole chunks for 2 or 3 cores)
    eager = (Tensor(x) - Tensor(y)).tolist()  # eager work between replays
    assert_close(eager, ref_ew(operator.sub, x, y))
    if seed < 2: outs.append(step(Tensor(x), Tensor(y)))
    else:
      with no_scheduling(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(tiny, "launch", lambda *_: pytest.fail("a replay launched a kernel from Python"))
        outs.append(step(Tensor(x), Tensor(y)))
    wants.append((ref_softmax(ref_matmul(x, w.tolist()), 1),
                  ref_reduce(math.fsum, ref_ew(lambda p, q: math.exp(2 * p + q), x, y), 0)))
  replay, = step.replays.values()
  assert replay.native is not None and len(replay.launches) >= 3
  assert any(l.prog.global_size[0] > 1 for _, l in replay.launches) or tiny.threads() == 1  # a threaded kernel
  for (soft, total), (want_soft, want_total) in zip(outs, wants):  # every call's outputs kept their own values
    assert_close(soft.tolist(), want_soft, rtol=1e-4)
    assert_close(total.tolist(), want_total, rtol=1e-4)

def test_jit_replay_lists_its_kernels_at_debug_2(capsys, monkeypatch):
  step = tiny.TinyJit(lambda x: (x + 1).sum(0) * 3)
  for _ in range(3): step(Tensor(rand_list((5, 7), 1)))
  capsys.readouterr()
  monkeypatch.setenv("DEBUG", "2")
  got = step(Tensor(rand_list((5, 7), 2)))
  assert_close(got.tolist(), [3 * math.fsum(r[j] + 1 for r in rand_list((5, 7), 2)) for j in range(7)], rtol=1e-5)
  replay, = step.replays.values()
  listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("***")]
  assert [line.split()[3] for line in listed] == [l.prog.name for _, l in replay.launches]

class FakeDriver:
  """The libcuda calls a CUDAGraph makes, recorded: what each node was added with and each launch ran."""
  def __init__(self): self.calls, self.nodes, self.params = [], 0, {}
  def __getattr__(self, name):
    def call(*args):
      self.calls.append(name)
      if name == "cuGraphAddKernelNode_v2":
        handle, _, deps, ndeps, params = args
        handle._obj.value, self.nodes = 100 + self.nodes, self.nodes + 1
        self.calls[-1] = (name, [deps[i] for i in range(ndeps)])
      if name == "cuGraphExecKernelNodeSetParams_v2":
        p = args[2]._obj
        self.params[args[1].value] = [ctypes.c_uint64.from_address(p.kernelParams[i]).value
                                      for i in range(3 if args[1].value == 100 else 2)]
    return call

def test_cuda_graph_chains_its_nodes_and_sets_only_the_parameters_that_changed():
  dev = types.SimpleNamespace(cu=FakeDriver(), use=lambda: None)
  progs = [types.SimpleNamespace(func=ctypes.c_void_p(7 + i)) for i in range(2)]
  graph = cuda_rt.CUDAGraph(dev, [(progs[0], [0, 1, 2], (3, 1, 1), (32, 1, 1)),
                                  (progs[1], [3, 0], (1, 1, 1), (4, 1, 1))])
  cu = dev.cu
  assert cu.calls[:3] == ["cuGraphCreate", ("cuGraphAddKernelNode_v2", []), ("cuGraphAddKernelNode_v2", [100])]
  cu.calls.clear()
  graph([10, 11, 12, 13])
  assert cu.calls.count("cuGraphExecKernelNodeSetParams_v2") == 2 and cu.calls[-1] == "cuGraphLaunch"
  assert cu.params == {100: [10, 11, 12], 101: [13, 10]}
  cu.calls.clear()
  graph([10, 11, 12, 14])  # only the second node's buffers changed
  assert cu.calls == ["cuGraphExecKernelNodeSetParams_v2", "cuGraphLaunch"] and cu.params[101] == [14, 10]
# ------------------------------------------------------------------------------------------------------------------
# rendered source, pinned: a change to what a kernel looks like in any dialect shows here first. The CPU's at a width
# given, not this machine's: the same text on every machine.

PINNED = {  # (program, device, vector width) -> source
  ("add", "CPU", 4): """typedef float float4 __attribute__((vector_size(16)));
void E_4_4(float* restrict data0, float* restrict data1, float* restrict data2) {
  for (int ridx0 = 0; ridx0 < 4; ridx0++) {
    int alu0 = (ridx0<<2);
    float4 val0 = *((float4*)(data2+alu0));
    float4 val1 = *((float4*)(data1+alu0));
    *((float4*)(data0+alu0)) = (val0+val1);
  }
}""",
  ("add", "CPU", 16): """typedef float float16 __attribute__((vector_size(64)));
void E_16(float* restrict data0, float* restrict data1, float* restrict data2) {
  float16 val0 = *((float16*)(data2+0));
  float16 val1 = *((float16*)(data1+0));
  *((float16*)(data0+0)) = (val0+val1);
}""",
  ("add", "CUDA", 4): """#define INFINITY (__int_as_float(0x7f800000))
#define NAN (__int_as_float(0x7fffffff))
extern "C" __global__ void __launch_bounds__(4) E_4_4(float* data0, float* data1, float* data2) {
  int lidx0 = threadIdx.x; /* 4 */
  int alu0 = (lidx0<<2);
  float4 val0 = *((float4*)(data2+alu0));
  float4 val1 = *((float4*)(data1+alu0));
  *((float4*)(data0+alu0)) = make_float4((val0.x+val1.x),(val0.y+val1.y),(val0.z+val1.z),(val0.w+val1.w));
}""",
  ("add", "METAL", 4): """#include <metal_stdlib>
using namespace metal;
kernel void E_4_4(device float* data0, device float* data1, device float* data2, \
uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int lidx0 = lid.x; /* 4 */
  int alu0 = (lidx0<<2);
  float4 val0 = *((device float4*)(data2+alu0));
  float4 val1 = *((device float4*)(data1+alu0));
  *((device float4*)(data0+alu0)) = (val0+val1);
}""",
  ("max", "CPU", 4): """#include <math.h>
void r_3_5(float* restrict data0, float* restrict data1) {
  for (int ridx0 = 0; ridx0 < 3; ridx0++) {
    float acc0 = (-INFINITY);
    for (int ridx1 = 0; ridx1 < 5; ridx1++) {
      float val0 = *(data1+(ridx1+(ridx0*5)));
      acc0 = (((acc0<val0)|(val0!=val0))?val0:acc0);
    }
    *(data0+ridx0) = acc0;
  }
}""",
  ("max", "CUDA", 4): """#define INFINITY (__int_as_float(0x7f800000))
#define NAN (__int_as_float(0x7fffffff))
extern "C" __global__ void __launch_bounds__(4) r_3_4_2(float* data0, float* data1) {
  int gidx0 = blockIdx.x; /* 3 */
  __shared__ __align__(16) float tempN[4];
  int lidx0 = threadIdx.x; /* 4 */
  float acc0 = (-INFINITY);
  bool alu0 = (lidx0<2);
  bool alu1 = (lidx0<1);
  for (int ridx0 = 0; ridx0 < 2; ridx0++) {
    int alu2 = (lidx0+(ridx0<<2));
    bool alu3 = (alu2<5);
    float val0 = (alu3?*(data1+(alu2+(gidx0*5))):0.0f);
    float alu4 = (alu3?val0:(-INFINITY));
    acc0 = (((acc0<alu4)|(alu4!=alu4))?alu4:acc0);
  }
  *(tempN+lidx0) = acc0;
  __syncthreads();
  float val1 = *(tempN+lidx0);
  float val2 = (alu0?*(tempN+(lidx0+2)):0.0f);
  if (alu0) { *(tempN+lidx0) = (((val1<val2)|(val2!=val2))?val2:val1); }
  __syncthreads();
  float val3 = *(tempN+lidx0);
  float val4 = (alu1?*(tempN+(lidx0+1)):0.0f);
  if (alu1) { *(tempN+lidx0) = (((val3<val4)|(val4!=val4))?val4:val3); }
  __syncthreads();
  float val5 = *(tempN+0);
  if ((lidx0==0)) { *(data0+gidx0) = val5; }
}""",
  ("where", "CPU", 4): """void E_3(int* restrict data0, int* restrict data1) {
  for (int ridx0 = 0; ridx0 < 3; ridx0++) {
    int val0 = *(data1+ridx0);
    _Bool alu0 = (2<val0);
    int alu1 = ((int)((unsigned int)val0<<3));
    *(data0+ridx0) = (alu0?alu1:(-1));
  }
}""",
}

def pinned_program(name: str) -> Tensor:
  if name == "add": return Tensor.empty(4, 4) + Tensor.empty(4, 4)
  if name == "max": return Tensor.empty(3, 5).max(axis=1)
  i = Tensor.empty(3, dtype="int")
  return (i > 2).where(i << 3, -1)

@pytest.mark.parametrize("name, device, width", PINNED)
def test_rendered_kernel_is_pinned(name, device, width):
  item, = tiny.schedule([pinned_program(name)])
  prog = tiny.lower(item.ast, tiny.Device.target(device)._replace(width=width))
  assert re.sub(r"temp\d+", "tempN", prog.src) == PINNED[(name, device, width)]

# --- gradients: every derivative rule against central finite differences of a pure-Python forward pass in float64

class Ref:
  """A float64 array in pure Python (flat values, a shape): the reference forward pass the gradients are checked on."""
  def __init__(self, vals, shape): self.vals, self.shape = [float(v) for v in vals], tuple(shape)
  def strides(self): return [math.prod(self.shape[i+1:]) for i in range(len(self.shape))]
  def at(self, idx): return self.vals[sum(i * s for i, s in zip(idx, self.strides()))]
  def indices(self): return itertools.product(*[range(s) for s in self.shape])
  def made(self, shape, f): return Ref([f(idx) for idx in itertools.product(*[range(s) for s in shape])], shape)
  def map(self, f, *others): return Ref([f(*vs) for vs in zip(self.vals, *[o.vals for o in others])], self.shape)
  def reduce(self, axes, f, start):
    shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    out = {}
    for idx in self.indices():
      key = tuple(0 if i in axes else v for i, v in enumerate(idx))
      out[key] = f(out.get(key, start), self.at(idx))
    return self.made(shape, lambda idx: out[idx])
  def reshape(self, shape): return Ref(self.vals, shape)
  def permute(self, order): return self.made([self.shape[o] for o in order],
                                             lambda idx: self.at([idx[order.index(d)] for d in range(len(order))]))
  def expand(self, shape):
    return self.made(shape, lambda idx: self.at([i if s > 1 else 0 for i, s in zip(idx, self.shape)]))
  def pad(self, pads):
    inside = lambda idx: all(b <= i < b + s for i, (b, _), s in zip(idx, pads, self.shape))  # noqa: E731
    return self.made([s + b + a for s, (b, a) in zip(self.shape, pads)],
                     lambda idx: self.at([i - b for i, (b, _) in zip(idx, pads)]) if inside(idx) else 0.0)
  def shrink(self, arg):
    return self.made([e - b for b, e in arg], lambda idx: self.at([i + b for i, (b, _) in zip(idx, arg)]))
  def flip(self, axes):
    return self.made(self.shape, lambda idx: self.at([s - 1 - i if d in axes else i
                                                      for d, (i, s) in enumerate(zip(idx, self.shape))]))
  def matmul(self, w):
    (n, k), m = self.shape, w.shape[1]
    return self.made((n, m), lambda idx: sum(self.at((idx[0], j)) * w.at((j, idx[1])) for j in range(k)))

def _weighted(out, weights): return sum(v * w for v, w in zip(out.vals, weights))  # a scalar loss of every output

def check_gradient(tiny_fn, ref_fn, *inputs, device="CPU", eps=1e-6, rtol=2e-3, atol=2e-4):
  """d loss / d input of tiny_fn against finite differences of ref_fn, where loss = sum(out * random weights)."""
  rng = random.Random(len(inputs) * 7 + len(inputs[0][1]))
  ts = [Tensor(vals, device=device, requires_grad=True).reshape(shape) for vals, shape in inputs]
  out = tiny_fn(*ts)
  weights = [rng.uniform(-1, 1) for _ in range(out.numel())]
  loss = (out * Tensor(weights, device=device).reshape(out.shape)).sum()
  grads = loss.gradient(*ts)
  for k, (vals, shape) in enumerate(inputs):
    def loss_at(i, v):
      refs = [Ref(vs, sh) for vs, sh in inputs]
      refs[k] = Ref(vals[:i] + [v] + vals[i+1:], shape)
      return _weighted(ref_fn(*refs), weights)
    want = [(loss_at(i, v + eps) - loss_at(i, v - eps)) / (2 * eps) for i, v in enumerate(vals)]
    assert_close(flat(grads[k].tolist()), want, rtol=rtol, atol=atol)

def flat(x): return [v for row in x for v in flat(row)] if isinstance(x, list) else [x]

def _vals(rng, n, lo=-2.0, hi=2.0): return [rng.uniform(lo, hi) for _ in range(n)]

UNARY_RULES = [  # (name, tiny, reference, low end of the inputs)
  ("neg", lambda x: -x, lambda v: -v, -2), ("reciprocal", Tensor.reciprocal, lambda v: 1 / v, 0.5),
  ("sqrt", Tensor.sqrt, math.sqrt, 0.5), ("exp2", Tensor.exp2, lambda v: 2 ** v, -2),
  ("log2", Tensor.log2, math.log2, 0.5), ("sin", Tensor.sin, math.sin, -2), ("cos", Tensor.cos, math.cos, -2),
  ("exp", Tensor.exp, math.exp, -2), ("log", Tensor.log, math.log, 0.5), ("square", Tensor.square, lambda v: v * v, -2),
  ("sigmoid", Tensor.sigmoid, lambda v: 1 / (1 + math.exp(-v)), -2), ("tanh", Tensor.tanh, math.tanh, -2),
  ("relu", Tensor.relu, lambda v: max(v, 0.0), -2), ("abs", Tensor.abs, abs, -2)]

@pytest.mark.parametrize("name,fn,ref,lo", UNARY_RULES, ids=[r[0] for r in UNARY_RULES])
def test_gradient_of_unary_op_matches_finite_differences(name, fn, ref, lo):
  rng = random.Random(name)
  vals = [v if abs(v) > 0.05 else 0.3 for v in _vals(rng, 15, lo, 2.0)]  # away from relu's and abs's kink
  check_gradient(fn, lambda x: x.map(ref), (vals, (3, 5)))

BINARY_RULES = [
  ("add", operator.add, operator.add), ("sub", operator.sub, operator.sub), ("mul", operator.mul, operator.mul),
  ("div", operator.truediv, operator.truediv), ("maximum", Tensor.maximum, max), ("minimum", Tensor.minimum, min)]

@pytest.mark.parametrize("name,fn,ref", BINARY_RULES, ids=[r[0] for r in BINARY_RULES])
def test_gradient_of_binary_op_matches_finite_differences(name, fn, ref):
  rng = random.Random(name)
  a, b = _vals(rng, 21), [v if abs(v) > 0.1 else 0.5 for v in _vals(rng, 21)]
  check_gradient(fn, lambda x, y: x.map(ref, y), (a, (7, 3)), (b, (7, 3)))

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_maximum_and_minimum_split_a_tie_evenly(device):
  a = Tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
  b = Tensor([1.0, 5.0, 3.0], device=device, requires_grad=True)
  assert a.maximum(b).sum().gradient(a, b)[0].tolist() == [0.5, 0.0, 0.5]
  assert [g.tolist() for g in a.minimum(b).sum().gradient(a, b)] == [[0.5, 1.0, 0.5], [0.5, 0.0, 0.5]]

def test_relu_gradient_at_zero_is_zero():
  x = Tensor([-1.0, 0.0, 2.0], requires_grad=True)
  assert x.relu().sum().gradient(x)[0].tolist() == [0.0, 0.0, 1.0]

def test_gradient_of_where_goes_to_the_branch_taken():
  rng = random.Random(5)
  c = [rng.random() < 0.5 for _ in range(10)]
  check_gradient(lambda x, y: Tensor(c).reshape(2, 5).where(x, y),
                 lambda x, y: Ref([a if k else b for k, a, b in zip(c, x.vals, y.vals)], x.shape),
                 (_vals(rng, 10), (2, 5)), (_vals(rng, 10), (2, 5)))

REDUCE_CASES = [(axis, keep) for axis in (0, 1, (0, 2), None) for keep in (False, True)]

@pytest.mark.parametrize("axis,keepdim", REDUCE_CASES)
def test_gradient_of_sum_and_mean_match_finite_differences(axis, keepdim):
  rng, shape = random.Random(str(axis)), (3, 5, 7)
  axes = tuple(range(3)) if axis is None else axis if isinstance(axis, tuple) else (axis,)
  count = math.prod(shape[a] for a in axes)
  def ref(x, scale=1.0):
    out = x.reduce(axes, operator.add, 0.0).map(lambda v: v * scale)
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(out.shape) if i not in axes))
  check_gradient(lambda x: x.sum(axis, keepdim), ref, (_vals(rng, 105), shape))
  check_gradient(lambda x: x.mean(axis, keepdim), lambda x: ref(x, 1 / count), (_vals(rng, 105), shape))

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_gradient_of_max_splits_evenly_among_ties(device):
  x = Tensor([[1.0, 3.0, 3.0, 0.0, 3.0], [2.0, -1.0, 0.5, 1.5, -3.0], [4.0, 4.0, 1.0, 1.0, 1.0]],
             device=device, requires_grad=True)
  assert_close(flat(x.max(1).sum().gradient(x)[0].tolist()),
               [0, 1/3, 1/3, 0, 1/3, 1, 0, 0, 0, 0, 0.5, 0.5, 0, 0, 0])
  assert_close(flat(x.min(1).sum().gradient(x)[0].tolist()), [0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1/3, 1/3, 1/3])

def test_gradient_of_max_without_ties_matches_finite_differences():
  rng = random.Random(9)
  check_gradient(lambda x: x.max(0), lambda x: x.reduce((0,), max, -math.inf).reshape((7,)), (_vals(rng, 35), (5, 7)))

MOVE_CASES = [
  ("reshape", lambda x: x.reshape(5, 3, 7), lambda x: x.reshape((5, 3, 7))),
  ("permute", lambda x: x.permute(2, 0, 1), lambda x: x.permute((2, 0, 1))),
  ("expand", lambda x: x[:, :1, :].expand(3, 4, 7), lambda x: x.shrink(((0, 3), (0, 1), (0, 7))).expand((3, 4, 7))),
  ("pad", lambda x: x.pad(((1, 2), None, (0, 3))), lambda x: x.pad(((1, 2), (0, 0), (0, 3)))),
  ("shrink", lambda x: x.shrink(((1, 3), (2, 5), None)), lambda x: x.shrink(((1, 3), (2, 5), (0, 7)))),
  ("flip", lambda x: x.flip((0, 2)), lambda x: x.flip((0, 2))),
  ("stride", lambda x: x[::2, 4:0:-3],
   lambda x: Ref([x.at((i, j, k)) for i in (0, 2) for j in (4, 1) for k in range(7)], (2, 2, 7))),
  ("chain", lambda x: x.permute(1, 0, 2).reshape(15, 7)[3:12].T.flip(0).pad(((0, 0), (2, 1))),
   lambda x: x.permute((1, 0, 2)).reshape((15, 7)).shrink(((3, 12), (0, 7))).permute((1, 0)).flip((0,))
              .pad(((0, 0), (2, 1))))]

@pytest.mark.parametrize("name,fn,ref", MOVE_CASES, ids=[m[0] for m in MOVE_CASES])
def test_gradient_of_movement_op_is_its_inverse(name, fn, ref):
  check_gradient(fn, ref, (_vals(random.Random(name), 105), (3, 5, 7)))

def test_gradient_of_matmul_softmax_and_log_softmax():
  rng = random.Random(3)
  def softmax(x, log=False):
    out = []
    for r in range(x.shape[0]):
      row = [x.at((r, c)) for c in range(x.shape[1])]
      m = max(row); total = sum(math.exp(v - m) for v in row)
      out += [v - m - math.log(total) if log else math.exp(v - m) / total for v in row]
    return Ref(out, x.shape)
  check_gradient(lambda a, b: (a @ b).softmax(-1), lambda a, b: softmax(a.matmul(b)),
                 (_vals(rng, 15), (3, 5)), (_vals(rng, 35), (5, 7)))
  check_gradient(lambda a: a.log_softmax(-1), lambda a: softmax(a, log=True), (_vals(rng, 21), (3, 7)))

def test_gradient_through_a_cast_and_a_contiguous():
  rng = random.Random(4)
  check_gradient(lambda x: (x.half().float() * 3).contiguous().exp(), lambda x: x.map(lambda v: math.exp(3 * v)),
                 (_vals(rng, 6, -1, 1), (2, 3)), rtol=3e-3, atol=3e-3)

def test_a_view_of_a_realized_result_leads_its_gradient_back_after_the_result_is_gone():
  """What a result was computed from is noted on its buffer: a view taken of it, after its own tensor is dropped, still
  leads the gradient back (not zeros)."""
  x = Tensor([3.0, 1.0], requires_grad=True)
  assert (x * 2).realize()[0].gradient(x)[0].tolist() == [2.0, 0.0]
  s = (x * x).realize()
  y = s.reshape(2, 1)[::-1].sum()
  del s
  y.backward()
  assert x.grad.tolist() == [6.0, 2.0]

@pytest.mark.parametrize("move, rows", [(lambda t: t[::-1], (6.0, 6.0)), (lambda t: t[1:], (0.0, 6.0)),
                                        (lambda t: t.T, (6.0, 6.0)), (lambda t: t.reshape(3, 2), (6.0, 6.0))])
def test_a_view_of_a_realized_result_realized_again_keeps_its_gradient(move, rows):
  """realize() asks whether a graph reads a trainable tensor to note what it was computed from: a view of a realized
  result whose own tensor is gone (the view it was taken of lives no more) does, so x.grad is not None."""
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
  z = (move((x * 2).realize()) * 3).realize()
  z.sum().backward()
  assert x.grad.tolist() == [[rows[0]] * 3, [rows[1]] * 3]  # 2 * 3 where the move keeps x's element
  h = (x * 2).realize()[:, 1:]
  loss = (h * h).sum()
  assert loss.item() == sum((2 * v) ** 2 for v in (2, 3, 5, 6))  # realized before the gradient is asked
  assert loss.gradient(x)[0].tolist() == [[0.0, 16.0, 24.0], [0.0, 40.0, 48.0]]  # 8x where kept

def test_an_assign_runs_once_and_an_equal_graph_gets_a_buffer_of_its_own():
  """Laziness stays invisible across writes: an assign realized by a reader runs once, not again when its own tensor
  is read (its note of the run is held); and a tensor built as an earlier one was, realized while that one has a write
  pending, gets a buffer of its own (not the one the earlier one's note points at), so neither write lands in the
  other's memory."""
  w = Tensor([1.0, 2.0, 3.0]).reshape(3, 1)
  w += 1
  (w * 2).realize()
  assert w.tolist() == [[2.0], [3.0], [4.0]]
  a = Tensor.full((3,), 2.5)
  keep = a * 1  # (holds the node a was)
  a.realize()
  a += 1
  b = Tensor.full((3,), 2.5).realize()
  b += 1
  assert a.tolist() == b.tolist() == [3.5] * 3 and keep.tolist() == [2.5] * 3
  x = Tensor([1.0, 2.0, 3.0])
  c = x * 2
  keep = c + 0
  c.realize()
  c *= 10
  d = (x * 2).realize()
  d += 1
  assert c.tolist() == [20.0, 40.0, 60.0] and d.tolist() == [3.0, 5.0, 7.0] and keep.tolist() == [2.0, 4.0, 6.0]

def test_a_tinyjit_replay_realizes_what_reads_a_weight_before_writing_it():
  """A tensor built from a weight before a jitted step that writes the weight keeps the value it had, as assign()
  keeps it: replays wrote the weight first (calls 3 and on read the new value)."""
  w = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  @tiny.TinyJit
  def step(x):
    w.assign(w + x)
    return (w * 1).realize()
  for i in range(4):
    before = w * 2
    step(Tensor([1.0, 1.0, 1.0]))
    assert before.tolist() == [2.0 * (v + i) for v in (1.0, 2.0, 3.0)] and w.tolist() == [v + i + 1 for v in (1, 2, 3)]

def test_a_tinyjit_capture_leaves_out_what_was_lazy_before_the_call_and_keeps_its_own_writes():
  """What was lazy before a jitted call (a write pending, a tensor the function reads) is realized before the capture:
  inside it, every replay wrote it again (w grew each call) or computed it again from buffers written since. A write
  the function leaves pending is part of its step: replays ran it a call late, or not at all."""
  w = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  w += 1  # pending
  @tiny.TinyJit
  def read(x): return (x * w).realize()
  for _ in range(4): assert read(Tensor([1.0, 1.0, 1.0])).tolist() == [2.0, 3.0, 4.0]
  assert w.tolist() == [2.0, 3.0, 4.0]
  v = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  h = v * 2  # lazy, read by the function
  @tiny.TinyJit
  def shifted(x): return (x + h).realize()
  for _ in range(4):
    assert shifted(Tensor([1.0, 1.0, 1.0])).tolist() == [3.0, 5.0, 7.0]
    v += 10
  u = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  @tiny.TinyJit
  def bump(x):
    y = (x * u).realize()
    u.assign(u + 1)  # left pending
    return y
  for i in range(5): assert bump(Tensor([1.0, 1.0, 1.0])).tolist() == [v + i for v in (1.0, 2.0, 3.0)]
  assert u.tolist() == [6.0, 7.0, 8.0]

def test_a_tensor_sharing_a_buffer_reads_a_write_pending_into_it_eagerly_and_under_tinyjit():
  """r shares w's buffer (a whole reshape); what is built from r after w.assign reads the write, even where the write
  and the reader are realized together (the write is ordered first)."""
  def step(w:Tensor) -> Tensor:
    r = w.reshape(2, 2)
    w.assign(w * 2)
    out = r.flatten() + 0
    Tensor.realize(out, w)
    return out
  for jit in (False, True):
    w = Tensor([1.0, 2.0, 3.0, 4.0]).contiguous().realize()
    f = tiny.TinyJit(lambda: step(w)) if jit else (lambda: step(w))
    for i in range(4): assert f().tolist() == [v * 2 ** (i + 1) for v in (1.0, 2.0, 3.0, 4.0)]

def test_a_write_into_a_view_of_part_of_a_buffer_writes_the_buffer():
  """t[:3].assign(x), t[1][2] = 5, t.T[1, 0] = 5, t[::-1][0] = 5: written where the view reads, as torch's and
  tinygrad's (not into a copy of the view's own); the view, and a tensor sharing the whole
  buffer, read the write. A view that expands (a row read twice) still writes a copy."""
  t = Tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).contiguous().realize()
  whole = t.reshape(2, 3)
  v = t[:3]
  v += 1
  assert v.tolist() == [1.0, 2.0, 3.0] and t.tolist() == [1.0, 2.0, 3.0, 3.0, 4.0, 5.0]
  t[1:4][0] = 7.0
  assert t.tolist() == [1.0, 7.0, 3.0, 3.0, 4.0, 5.0] and whole.tolist() == [[1.0, 7.0, 3.0], [3.0, 4.0, 5.0]]
  n = Tensor.zeros(3, 4).contiguous().realize()
  n[1][2] = 5.0
  n.T[3, 0] = 6.0
  n[::-1][0, 1] = 7.0
  n[0][Tensor([0, 2])] = 8.0
  assert n.tolist() == [[8.0, 0.0, 8.0, 6.0], [0.0, 0.0, 5.0, 0.0], [0.0, 7.0, 0.0, 0.0]]
  y = (Tensor([1.0, 2.0, 3.0]) * 2).realize()
  y[0] = 5.0  # (a computed result's buffer, as a tensor's)
  assert y.tolist() == [5.0, 4.0, 6.0]
  t = Tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).contiguous().realize()
  v = t[2:]
  assert v.tolist() == [2.0, 3.0, 4.0, 5.0] and v.realize() is v  # (read, or realized, it made a copy of its own)
  v[0] = 50.0
  v += 1
  assert t.tolist() == [0.0, 1.0, 51.0, 4.0, 5.0, 6.0]
  t = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).contiguous().realize()
  h = t.reshape(6)
  h += 5
  t.realize()  # (all of h's write: t stayed a copy of it, and h missed t's write below)
  t.assign(t * 0)
  assert h.tolist() == [0.0] * 6
  row = n[:1].expand(2, 4)
  row.assign(Tensor.ones(2, 4))
  assert row.tolist() == [[1.0] * 4] * 2 and n.tolist()[0] == [8.0, 0.0, 8.0, 6.0]

def test_gradients_through_writes_into_views_and_what_they_cant_give():
  """A write through a view of a tensor with a write pending passes gradients on to both writes (the view setitem
  picks, and the views it moves back through, realized the first as readers: a leaf); a gradient that needs the value
  of a pending write a later one replaces (t *= v: v's is t's old value) computes it again, as torch's (15, not 45),
  and so does one that needs a realized result's old value; one that needs a buffer's value from before a write that
  nothing computes raises rather than read the new one."""
  x, v0, v1 = (Tensor(v, requires_grad=True) for v in ([1.0, 2.0, 3.0, 4.0, 5.0], [1.0] * 5, 7.0))
  t = x * 2
  t += v0
  w = t[1:]
  w[0] = v1
  (t * Tensor([1.0, 2.0, 3.0, 4.0, 5.0])).sum().backward()
  assert x.grad.tolist() == [2.0, 0.0, 6.0, 8.0, 10.0] and v0.grad.tolist() == [1.0, 0.0, 3.0, 4.0, 5.0]
  assert v1.grad.item() == 2.0 and t.tolist() == [3.0, 7.0, 7.0, 9.0, 11.0]
  x, v = Tensor([1.0, 2.0, 3.0], requires_grad=True), Tensor(3.0, requires_grad=True)
  t = x * 2
  t[0] = 5.0
  t *= v
  t.sum().backward()
  assert v.grad.item() == 15.0 and x.grad.tolist() == [0.0, 6.0, 6.0] and t.tolist() == [15.0, 12.0, 18.0]
  x.grad = v.grad = None
  t = (x * 2).realize()  # (its old value is computed again from what it was computed from)
  t *= v
  t.sum().backward()
  assert v.grad.item() == 12.0 and x.grad.tolist() == [6.0, 6.0, 6.0]
  b = Tensor([1.0, 2.0, 3.0]).contiguous().realize()  # (nothing computes its old value again: it is kept)
  b *= v
  b.sum().backward()
  assert v.grad.item() == 12.0 + 6.0

def test_a_tinyjit_replay_runs_a_write_pending_into_a_weight_first():  # (a learning rate set between steps: ignored)
  w = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  @tiny.TinyJit
  def f(x): return (x * w).realize()
  for i in range(5):
    assert f(Tensor([1.0, 1.0, 1.0])).tolist() == [v + 10 * i for v in (1.0, 2.0, 3.0)]
    w.assign(w + 10)  # pending

def test_a_tinyjit_function_may_return_a_weight_it_reads():  # (the second call, capturing, doesn't raise)
  w = Tensor([1.0, 2.0]).contiguous().realize()
  @tiny.TinyJit
  def f(x): return w, (x * w).realize()
  for i in range(4):
    same, y = f(Tensor([1.0, 1.0]) * i)
    assert same.tolist() == [1.0, 2.0] and y.tolist() == [i * 1.0, i * 2.0]

def test_a_tinyjit_replay_makes_anew_the_buffers_its_call_made_and_fills_its_data_again():
  """A tensor of Python data written in place inside the function starts from its data on each replay (not from
  the last replay's write); a tensor the function made and assigned is a new output each replay (a result kept from
  one replay doesn't change with the next)."""
  @tiny.TinyJit
  def bumped(x):
    t = Tensor([1.0, 2.0])
    t += 1
    return (t + x).realize()
  assert [bumped(Tensor([0.0, 0.0])).tolist() for _ in range(5)] == [[2.0, 3.0]] * 5
  c = Tensor([1.0, 2.0]).contiguous().realize()
  @tiny.TinyJit
  def written(x):
    t = -c
    t.assign(c + x)
    return t.realize()
  kept = [written(Tensor([float(i), 0.0])) for i in range(5)]
  assert [k.tolist() for k in kept] == [[1.0 + i, 2.0] for i in range(5)]

def test_a_raw_kernel_realizes_what_reads_its_buffers_first():  # as an assign does (not the incremented values)
  a = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  before = a * 2
  tiny.RawKernel("inc", "void inc(float* a) { for (int i = 0; i < 3; i++) a[i] += 1.0f; }")(a)
  assert before.tolist() == [2.0, 4.0, 6.0] and a.tolist() == [2.0, 3.0, 4.0]

def test_a_write_pending_into_a_shared_buffer_runs_before_the_buffer_is_read():
  """Tensors sharing a buffer (a whole-buffer reshape, a detach) see each other's writes, as where ops run at once:
  a write pending in one wasn't run when the other was read, so a realize() with no other effect changed the answer
  (and a write whose tensor was dropped was lost)."""
  for make in (lambda t: t.reshape(3, 1), lambda t: t.detach()):
    a = Tensor([1.0, 2.0, 3.0])
    b = make(a)
    b += 1
    assert a.tolist() == [2.0, 3.0, 4.0]
  a = Tensor([1.0, 2.0, 3.0])
  b = a.reshape(3, 1)
  b += 1
  del b  # (its write, pending, is still a's)
  assert a.tolist() == [2.0, 3.0, 4.0]
  b, c = Tensor([1.0, -1.0, 3.0]), Tensor([1.5, 2.0, -1.5]).realize()
  d = b.detach()
  d.assign((c + d).relu())
  assert b.maximum(c).tolist() == [2.5, 2.0, 1.5]

def test_views_built_by_other_moves_are_each_realized():
  """Two roots of one realize that are one node over slots (views of one buffer built by other moves) each get the
  stored view: the second was left lazy. (Views of a's buffer, both show its write, as torch's views.)"""
  a = Tensor([1.0, 2.0, 3.0, 4.0])
  s1, s2 = a[0:2], a[0:3][0:2]
  a += 10
  a.realize()
  assert s1.tolist() == s2.tolist() == [11.0, 12.0]
  b = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  p, q = b.T.contiguous(), b.T.detach().contiguous()
  Tensor.realize(p, q)
  assert p.uop.op is q.uop.op is tiny.Ops.VIEW and p.tolist() == q.tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]

def test_an_optimizer_step_leaves_a_tensor_that_shared_its_parameters_buffer():  # (equal graphs, one buffer)
  keep = Tensor.ones(3).contiguous()  # (holds the node)
  c = Tensor.ones(3).contiguous().realize()
  c.requires_grad = True
  d = Tensor.ones(3).contiguous().realize()
  opt = tiny.nn.optim.SGD([c], lr=0.5)
  c.sum().backward()
  opt.step()
  assert c.tolist() == [0.5] * 3 and d.tolist() == [1.0] * 3 and keep.tolist() == [1.0] * 3

def test_a_gradient_reaches_a_tensor_with_a_write_pending_and_flows_into_the_write():
  """a -= b: a's gradient is taken at its new value; b's flows through the write as torch's does for a tensor that
  isn't a leaf (2b - 2a), while it is pending; a write done is its buffer, a leaf (2b). A write into part of a tensor
  (setitem) passes its gradient on to the value and to what the rest still holds (none flowed through a write)."""
  for realize, b_grad in ((False, [-5.0, -12.0, -2.0]), (True, [-2.0, -3.0, -1.0])):
    a = Tensor([0.5, 3.0, 0.0]).contiguous()
    a.requires_grad = True
    b = Tensor([-1.0, -1.5, -0.5]).contiguous()
    b.requires_grad = True
    a -= b
    if realize: a.realize()
    ((a * a).sum() + (b * b).sum()).backward()
    assert a.grad.tolist() == [3.0, 9.0, 1.0] and b.grad.tolist() == b_grad  # 2a (a written)
  x, v = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True), Tensor([7.0, 8.0, 9.0], requires_grad=True)
  t = x * 2
  t[1] = v
  (t * t).sum().backward()  # t = [2x[0], v]: 8x[0] for x's first row, 0 for its second; 2v
  assert x.grad.tolist() == [[8.0, 16.0, 24.0], [0.0, 0.0, 0.0]] and v.grad.tolist() == [14.0, 16.0, 18.0]
  z = Tensor.zeros(4).contiguous()
  z[:2] = x[0, :2] * 3
  assert z.sum().gradient(x)[0].tolist() == [[3.0, 3.0, 0.0], [0.0, 0.0, 0.0]]

def test_a_gradient_through_a_result_realized_before_its_inputs_were_written_raises_or_reads_the_write():
  """y keeps the value it had before x was written; its gradient, taken at x's new value, would be
  wrong: it raises, as torch's autograd does for a tensor modified in place. A write y read, written over since, is
  read as its value, computed again."""
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  y = (x * x).realize()
  x.assign(x + 1).realize()
  assert y.tolist() == [1.0, 4.0, 9.0]
  with pytest.raises(RuntimeError, match="written since"): y.sum().backward()
  w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  opt = tiny.nn.optim.SGD([w], lr=0.5)
  act = w.sin().realize()
  (w * w).sum().backward()
  opt.step()
  with pytest.raises(RuntimeError, match="written since"): act.sum().backward()
  assert (w.sin().sum().gradient(w)[0]).tolist() == [1.0, 1.0, 1.0]  # computed again: at w = 0
  h = Tensor([3.0, 4.0]).realize()
  h.assign(Tensor([5.0, 6.0]) * 2)
  y = h * x[:2]  # reads the write, done before y is: read again as its value (not the next write's, [7, 8])
  h.assign(Tensor([7.0, 8.0])).realize()
  assert y.sum().gradient(x)[0].tolist() == [10.0, 12.0, 0.0]
  h = x * 1.0
  h *= 2.0
  y = h.exp()
  h += y  # y realized first, reading the first write
  want = [math.exp(2 * v) * (4 * v + 2 + 4 * math.exp(2 * v)) for v in (2, 3, 4)]  # of e^2x (2x + e^2x), x written
  assert (y * h).sum().gradient(x)[0].tolist() == pytest.approx(want, rel=1e-5)
  b = Tensor([3.0, 4.0]).contiguous().realize()
  y = (x[:2] * b).realize()
  b += 1
  assert (y * 2).sum().gradient(y)[0].tolist() == [2.0, 2.0]  # (y's graph read b: its old value is gone, not needed)
  with pytest.raises(RuntimeError, match="values a write replaces"): (y * 2).sum().gradient(x)  # (b's old value)

# a = [[1, 2], [3, 4]]; each program's gradient of loss with respect to a, as torch's autograd gives it (by hand: h
# = a^3 - a^2 in the first, so 3a^2 - 2a; in the detached writes, the gradient passes by the write)
@pytest.mark.parametrize("program, grad", [
  ("h = a*a*a; h.realize(); v = h.T; h -= a*a; v.realize(); loss = v.sum()", [[1, 8], [21, 40]]),
  ("h = a*a*a; h.realize(); v = h[1:]; v *= a[1:]; v.realize(); loss = v.sum()", [[0, 0], [108, 256]]),
  ("h = a*a*a; h.realize(); v = h.reshape(4); v += 1; v.realize(); loss = (h * a).sum()", [[5, 33], [109, 257]]),
  ("h = a*1.0; h.realize(); h *= 3; h += h * 2.0; loss = h.sum()", [[9, 9], [9, 9]]),
  ("h = a*1.0; h.realize(); h += a; h[1] = (h * 2.0)[1]; h.realize(); loss = h.sum()", [[2, 2], [4, 4]]),
  ("h = a*a; h.realize(); v = h.T; v += a.T; h.realize(); v += 1; loss = h.sum()", [[3, 5], [7, 9]]),
  ("h = a*2.0; h.realize(); d = h.detach(); d += 1; loss = h.sum()", [[2, 2], [2, 2]]),
  ("h = a*2.0; h.realize(); h *= a; d = h.detach(); d += 1; d.realize(); loss = (h*a).sum()", [[7, 25], [55, 97]]),
  ("h = a*2.0; h.realize(); d = h.detach()[1:]; d *= 3; loss = (h*h).sum()", [[8, 16], [72, 96]]),  # h: 2a, 6a
  ("h = a*a; h.realize(); r = h*1.0; h += a; r += r*2; loss = r.sum()", [[6, 12], [18, 24]]),  # r's from a, not h
  ("h = a*a; h.realize(); b = Tensor.ones(2, 2).contiguous().realize(); v = h.T; v -= a + b; b += 1; loss = v.sum()",
   [[1, 3], [5, 7]]),  # (b's value, written since, is not needed)
  ("y = (a*a).realize(); a.assign(a + 1).realize(); loss = y.sum()", None),  # y's from a's old value
  ("h = Tensor.ones(3, 2).contiguous().realize(); v = h[1:]; v[1:] += a[1:] * 3.0; loss = h.sum()", [[0, 0], [3, 3]]),
])
def test_a_write_is_seen_by_gradients_as_it_was_made(program, grad):
  """A write's value as gradients see it is fixed when the write is made, over what its buffer held then: a later
  write into the buffer, or its realize (through a view, or of both writes together), changes nothing; a write
  through a detached view is passed by; a gradient into a tensor's value written since raises. Each of these
  gave None or a wrong gradient, silently."""
  a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  ns = {"a": a, "Tensor": Tensor}
  exec(program, ns)
  if grad is None:
    with pytest.raises(RuntimeError, match="written since"): ns["loss"].backward()
  else: assert ns["loss"].backward() is not None and a.grad.tolist() == grad

# the same on a 2x3 a, each output weighted by w (W: w.T), so that a transpose or a row swapped shows; torch's values
@pytest.mark.parametrize("program, grad", [
  ("h = a*a*a; R(h); v = h.T; h -= a*a; R(v); loss = (v * W).sum()", [[1, 16, 21], [120, 65, 192]]),
  ("h = a*1.0; R(h); h *= 3; h += h * 2.0; loss = (h * w).sum()", [[9, 18, 9], [27, 9, 18]]),
  ("h = a*a; R(h); v = h.T; v += a.T; R(h); v += 1; loss = (h * w).sum()", [[3, 10, 7], [27, 11, 26]]),
  ("h = a*2.0; R(h); d = h.detach()[1:]; d *= 3; loss = (h * h * w).sum()", [[8, 32, 24], [288, 120, 288]]),
  ("h = a*a; R(h); r = h*1.0; h += a; r += r*2; loss = (r * w).sum()", [[6, 24, 18], [72, 30, 72]]),
  ("b = P(); b[1:] *= a[1:]; loss = (b * b * w).sum()", [[0, 0, 0], [384, 250, 864]]),  # (b's old value kept)
])
def test_a_write_is_seen_by_gradients_as_it_was_made_on_a_non_square_tensor(program, grad):
  a = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
  w = Tensor([[1.0, 2.0, 1.0], [3.0, 1.0, 2.0]])
  ns = {"a": a, "w": w, "W": w.T.contiguous(), "R": Tensor.realize,
        "P": lambda: Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) * 1.0}
  exec(program, ns)
  ns["loss"].backward()
  assert a.grad.tolist() == grad

def test_an_expression_realized_before_a_write_is_computed_again_after_it():
  """A realized node remembers the buffer that holds its value, and an equal graph built later reads it; once a
  buffer the node reads is written (an assign, an optimizer's step, a TinyJit replay), the note is stale. It was
  read anyway where the node lived on (a trainable graph's, kept for its gradient): a model evaluated after each step
  gave the first step's output."""
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  kept = (x * 2).realize()
  x.assign(Tensor([10.0, 20.0, 30.0])).realize()
  assert (x * 2).tolist() == [20.0, 40.0, 60.0] and kept.tolist() == [2.0, 4.0, 6.0]
  w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  want, grads = [1.0, 2.0, 3.0], []
  for _ in range(3):  # gradient descent by hand, each step's gradient kept
    grads.append((w * w).sum().gradient(w)[0].realize())
    w.assign(w - 0.25 * grads[-1]).realize()
    want = [v - 0.25 * 2 * v for v in want]
    assert w.tolist() == want
  Tensor.manual_seed(0)
  layer = tiny.nn.Linear(3, 2)
  opt = tiny.nn.optim.SGD(tiny.nn.state.get_parameters(layer), lr=0.1)
  data = Tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
  def step():
    opt.zero_grad()
    layer(data).square().sum().backward()
    opt.step()
  for fn in (step, tiny.TinyJit(step)):
    seen = []
    for _ in range(4):
      fn()
      seen.append(layer(data).realize())  # the same graph each time, the earlier results kept
      w, b = layer.weight.tolist(), layer.bias.tolist()
      want = [[sum(r[k] * w[j][k] for k in range(3)) + b[j] for j in range(2)] for r in data.tolist()]
      assert_close(seen[-1].tolist(), want, rtol=1e-6, atol=1e-6)

def test_realize_in_the_middle_changes_no_gradient():
  rng = random.Random(6)
  a, b = _vals(rng, 12), _vals(rng, 12)
  def grads(realize):
    x, w = Tensor(a, requires_grad=True).reshape(3, 4), Tensor(b, requires_grad=True).reshape(4, 3)
    h = (x @ w).tanh()
    if realize: h.realize()
    loss = (h * h.T.flip(0).T).sum()
    if realize: loss.realize()
    return [g.tolist() for g in loss.gradient(x, w)]
  assert_close(flat(grads(True)), flat(grads(False)), rtol=1e-6, atol=1e-6)

def test_gradient_with_respect_to_an_intermediate_and_a_view_of_it():
  x = Tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], requires_grad=True)
  flat6 = x.reshape(2, 3).reshape(6)  # views of x made by moves: distinct nodes, each with its own gradient
  y = (flat6 * flat6).sum()
  gx, gflat = y.gradient(x, flat6)
  assert gx.tolist() == gflat.tolist() == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
  assert flat6.uop is not x.uop and flat6.uop.arg.bare == x.uop.arg.bare

def test_backward_fills_grad_and_accumulates():
  x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
  y = Tensor([4.0, 5.0, 6.0])  # requires no grad: gets none
  (x * y).sum().backward()
  assert x.grad.tolist() == [4.0, 5.0, 6.0] and y.grad is None
  first = x.grad
  (x * x).sum().backward()
  assert x.grad.tolist() == [6.0, 1.0, 12.0] and x.grad is first  # (added in place, as torch's and tinygrad's)

@pytest.mark.parametrize("realized", ["none", "the write", "its reader"])
def test_a_write_realized_passes_gradients_on(realized):
  """t = x * 2; t += v: the gradient passes through the write to x and v whether it is pending, realized, or realized
  by a reader (not None: a write done was a leaf); a buffer written in place with a value computed from v passes v's
  gradient on, where it needs the value the write replaced too (b *= v: b's old value, kept as torch keeps it)."""
  x, v = Tensor([1.0, 2.0], requires_grad=True), Tensor([0.5, 0.25], requires_grad=True)
  t = x * 2
  t += v
  if realized == "the write": t.realize()
  y = t.exp()
  if realized == "its reader": y.realize()
  y.sum().backward()
  want = [math.exp(2 * a + b) for a, b in ((1.0, 0.5), (2.0, 0.25))]
  assert v.grad.tolist() == pytest.approx(want) and x.grad.tolist() == pytest.approx([2 * w for w in want])
  w = Tensor(3.0, requires_grad=True)
  b = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  b += w
  b.realize().sum().backward()
  assert w.grad.item() == 3.0
  b *= w
  b.realize()
  b.sum().backward()
  assert w.grad.item() == 3.0 + (1.0 + 2.0 + 3.0) + 2 * 3 * 3.0  # b = (b0 + w) * w: d/dw sum = sum(b0) + 6w, added

def test_a_realized_write_reading_its_own_buffer_passes_gradients_as_torch():
  """h = a * a realized, then written from itself and realized: the gradient reaches a through the old value (the
  graph it was computed from) and the new, as torch's (hand-derived: d/da of the sum); two writes realized together
  note the last; equal gradients of two leaves stay each its own, across a second backward."""
  def grad(write):
    a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    h = (a * a).realize()
    write(h)
    h.realize().sum().backward()
    return a.grad.tolist()
  def flip(h): h += h.flip(0)
  def column(h): h[:, 0] = h[:, 1]
  assert grad(flip) == [[4.0, 8.0], [12.0, 16.0]] and grad(column) == [[0.0, 8.0], [0.0, 16.0]]
  a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  h = a * 1.0
  h += a
  h[0, 1] = 0.5
  h.realize().sum().backward()
  assert a.grad.tolist() == [[2.0, 0.0], [2.0, 2.0]]
  a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
  (a + b).sum().backward()
  (a * b).sum().backward()
  assert a.grad.tolist() == [4.0, 5.0] and b.grad.tolist() == [2.0, 3.0]

def test_a_gradient_flows_back_through_a_copy_to_another_device():
  """to() and clone(device=) copy at once; the copy notes what it was copied from, so the gradient is copied back
  (not zeros, nor a .grad left None)."""
  t = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  y = (t * 3).clone(device="PYTHON")
  z = y.exp().sum().to("CPU") + y.to("CPU").square().sum()
  want = [3 * math.exp(3 * v) + 18 * v for v in (1.0, 2.0, 3.0)]
  assert z.gradient(t)[0].tolist() == pytest.approx(want, rel=1e-5)
  z.backward()
  assert t.grad.device == "CPU" and t.grad.tolist() == pytest.approx(want, rel=1e-5)

def test_backward_of_a_non_scalar_needs_a_gradient():
  x = Tensor([1.0, 2.0], requires_grad=True)
  with pytest.raises(AssertionError, match="needs a scalar"): (x * 2).backward()  # (tinygrad's type)
  (x * 2).backward(Tensor([1.0, 10.0]))
  assert x.grad.tolist() == [2.0, 20.0]

def test_gradients_that_cant_be_computed_raise_naming_why():
  with pytest.raises(TypeError, match="only float tensors"): Tensor([1, 2], requires_grad=True)
  x = Tensor([1.5, 2.5], requires_grad=True)
  with pytest.raises(RuntimeError, match="CAST"): x.int().float().sum().gradient(x)
  assert Tensor([1.0]).sum().gradient(x)[0].tolist() == [0.0, 0.0]  # it doesn't depend on x: zeros, as tinygrad
  assert (x * (x > 2)).sum().gradient(x)[0].tolist() == [0.0, 1.0]  # a comparison passes 0, as in torch
  with pytest.raises(TypeError, match="tensor of int"): x.sum().gradient(Tensor([1, 2]))
  assert x.detach().sum().gradient(x, materialize_grads=True)[0].tolist() == [0.0, 0.0]
  assert (x.detach() * x).sum().gradient(x)[0].tolist() == [1.5, 2.5]  # the detached factor is a constant

def test_train_is_a_context_and_a_decorator():
  assert Tensor.training is False
  with Tensor.train(): assert Tensor.training is True
  assert Tensor.training is False
  @Tensor.train()
  def step(): return Tensor.training
  assert step() is True and Tensor.training is False


def _random_differentiable_program(seed:int):
  """Steps on a current value, each applied alike to a tensor and a Ref: elementwise ops (some with a new input of the
  current shape), reduces kept as dims, and moves. Returns the input shapes and one function for each side."""
  rng = random.Random(seed)
  shapes = [tuple(rng.randint(2, 5) for _ in range(rng.randint(2, 3)))]
  steps = []
  for _ in range(rng.randint(3, 7)):
    shape, kind = shapes[-1] if not steps else steps[-1][2], rng.choice(
      ["unary", "unary", "binary", "binary", "reduce", "permute", "flip", "pad", "shrink", "where"])
    nd = len(shape)
    if kind == "unary": arg = rng.choice(["sin", "tanh", "sigmoid", "square", "scale"])
    elif kind in ("binary", "where"):
      arg = (rng.choice(["add", "sub", "mul", "maximum"]), len(shapes)); shapes.append(shape)
    elif kind == "reduce": arg = (rng.choice(["sum", "max"]), rng.randrange(nd))
    elif kind == "permute": arg = tuple(rng.sample(range(nd), nd))
    elif kind == "flip": arg = (rng.randrange(nd),)
    elif kind == "pad": arg = tuple((rng.randint(0, 2), rng.randint(0, 1)) for _ in range(nd))
    else: arg = tuple((b, rng.randint(b + 1, s)) for s in shape for b in [rng.randint(0, s - 1)])
    if kind == "where": arg = (arg, [rng.random() < 0.5 for _ in range(math.prod(shape))])
    out = (tuple(1 if i == arg[1] else s for i, s in enumerate(shape)) if kind == "reduce" else
           tuple(shape[i] for i in arg) if kind == "permute" else
           tuple(s + b + a for s, (b, a) in zip(shape, arg)) if kind == "pad" else
           tuple(e - b for b, e in arg) if kind == "shrink" else shape)
    steps.append((kind, arg, out))
  unary = {"sin": (Tensor.sin, math.sin), "tanh": (Tensor.tanh, math.tanh), "square": (Tensor.square, lambda v: v * v),
           "sigmoid": (Tensor.sigmoid, lambda v: 1 / (1 + math.exp(-v))),
           "scale": (lambda x: x * -1.5, lambda v: -1.5 * v)}
  binary = {"add": (operator.add, operator.add), "sub": (operator.sub, operator.sub),
            "mul": (operator.mul, operator.mul), "maximum": (Tensor.maximum, max)}
  def run(side:int, *xs):
    x = xs[0]
    for kind, arg, out in steps:
      if kind == "unary": x = unary[arg][0](x) if side == 0 else x.map(unary[arg][1])
      elif kind == "binary": x = binary[arg[0]][0](x, xs[arg[1]]) if side == 0 else x.map(binary[arg[0]][1], xs[arg[1]])
      elif kind == "where":
        (op, k), mask = arg
        x = Tensor(mask, device=x.device).reshape(out).where(x, xs[k]) if side == 0 else \
          Ref([a if m else b for m, a, b in zip(mask, x.vals, xs[k].vals)], out)
      elif kind == "reduce":
        fn = {"sum": (Tensor.sum, operator.add, 0.0), "max": (Tensor.max, max, -math.inf)}[arg[0]]
        x = fn[0](x, arg[1], keepdim=True) if side == 0 else x.reduce((arg[1],), fn[1], fn[2])
      elif kind == "permute": x = x.permute(arg) if side == 0 else x.permute(arg)
      elif kind == "flip": x = x.flip(arg) if side == 0 else x.flip(arg)
      elif kind == "pad": x = x.pad(arg) if side == 0 else x.pad(arg)
      else: x = x.shrink(arg) if side == 0 else x.shrink(arg)
    return x
  return shapes, steps, functools.partial(run, 0), functools.partial(run, 1)

@pytest.mark.parametrize("seed", range(6))
def test_argmax_and_cummax_point_at_a_max_however_a_compiler_fuses_their_input(seed):
  """x*c - y, computed in the max's kernel and again where it is compared with the max, can differ in the last bit where
  a C compiler fuses the multiply-add in one and not the other: no element would match, and the index would be out of
  range. They compare stored values."""
  rng = random.Random(seed)
  r, c = rng.choice([(4, 4), (7, 5), (5, 33)])
  x = (Tensor(rand_list((r, c), 200 + seed, -1.5, 1.5)).pad(((2, 1), (0, 0))).flip(1) * -1.5
       - Tensor(rand_list((r + 3, c), 300 + seed, -1.5, 1.5)))
  xs = x.contiguous().realize().tolist()
  for axis in (0, 1):
    rows = [list(col) for col in zip(*xs)] if axis == 0 else xs
    assert [row[i] for row, i in zip(rows, x.argmax(axis).tolist())] == [max(row) for row in rows]
    where = x.cummax(axis)[1]
    running = [[row[i] for i in idx] for row, idx in zip(rows, (where.T if axis == 0 else where).tolist())]
    assert running == [list(itertools.accumulate(row, max)) for row in rows]
    values = x.sort(axis)[0]  # the values themselves, each placed once
    assert (values.T if axis == 0 else values).tolist() == [sorted(row) for row in rows]

@pytest.mark.parametrize("shape", [(3, 3), (5, 7), (4, 3)])
def test_a_row_program_whose_outputs_dont_all_read_the_row_back(shape):
  """A softmax's tril: reread stores the row's exps into the output in the sum's loop, and the outputs above the
  diagonal (zeros) read none of it back. Those zeros were written before the loop's stores, or the outputs read back
  before the stores where the sum's loop was unrolled away (and the gradient of a triu's logsumexp came out so)."""
  r, c = shape
  a = rand_list(shape, 61)
  def softmax(row): return [math.exp(v - max(row)) / math.fsum(math.exp(w - max(row)) for w in row) for v in row]
  want = [[p if j <= i else 0.0 for j, p in enumerate(softmax(row))] for i, row in enumerate(a)]
  assert_close(flat(Tensor(a).softmax(-1).tril().tolist()), flat(want))
  x = Tensor(a, requires_grad=True)
  x.triu(-1).logsumexp(-1).sum().backward()  # d/dx: the softmax of each row's kept values, where kept
  kept = [[v if j >= i - 1 else 0.0 for j, v in enumerate(row)] for i, row in enumerate(a)]
  grad = [[p if j >= i - 1 else 0.0 for j, p in enumerate(softmax(row))] for i, row in enumerate(kept)]
  assert_close(flat(x.grad.tolist()), flat(grad))

def test_a_row_program_over_a_broadcast_row_and_one_masked_away():
  """A softmax along a broadcast dim: its exp doesn't vary along the row, so it was the sum's own value, and reread's
  read-back replaced it inside the sum (C that didn't compile). A softmax masked to zeros: the outputs read nothing
  back, and reread's stores stayed in a loop no reduce made (KeyError in linearize)."""
  for n in (2, 3, 7):
    col = Tensor([[float(i)] for i in range(n)])
    assert_close(flat(col.expand(n, n + 1).softmax(1).tolist()), [1 / (n + 1)] * (n * (n + 1)))
    assert_close(flat(col.expand(n, n).softmax(1).var(0).tolist()), [0.0] * n)
    assert Tensor(rand_list((n, n), 62)).softmax(-1).triu(1).tril(0).tolist() == [[0.0] * n] * n

def test_beam_offers_no_output_lanes_beside_a_blocks_shared_reduce():
  """On a GPU, outputs upcast into lanes beside a group (a block's shared reduce) each read the other lane's result:
  BEAM's candidates offered it after the heuristic's group (a row's var, 4x8, came out 0.23, 0.09, 4.6, 0.09)."""
  target = tiny.Device.target("PYTHON")
  x = Tensor([[float(i * 8 + j) / 8 for j in range(8)] for i in range(4)], device="PYTHON")
  for out in (x.var(1), (x - x.mean(1, keepdim=True)).sum(1), x.softmax(1)):
    for item in tiny.schedule([out]):
      sink = tiny.ranged(item.ast, target)
      opts = tiny.heuristic(sink, target)
      for o in opts: sink = tiny.apply_opt(sink, o)
      if any(o.kind is tiny.AxisType.GROUP for o in opts):
        assert not any(o.kind is tiny.AxisType.UPCAST for o in tiny.candidates(sink, target))

def test_a_sum_over_a_cumsum_unrolled_with_it():
  """Both reduces unrolled: the cumsum's loop (a group of its own) was made after the sum's, whose body read it, so
  linearize met a loop with no end (KeyError); the gradient of pad -> cumsum -> relu -> sum hit it too."""
  m = (Tensor([1.0]).pad((2, 0)).cumsum(0) > 0).where(1.0, 0.0)  # [0, 0, 1]
  assert Tensor.ones(3, 3, dtype=dtypes.bool).tril().where(m.unsqueeze(-1), 0.0).sum(0)[2:].tolist() == [1.0]
  z = Tensor([1.0], requires_grad=True)
  assert z.pad((2, 0)).cumsum(0).relu().sum().gradient(z)[0].tolist() == [1.0]

def test_a_max_reduce_gets_its_gradient_however_a_compiler_fuses_its_input():
  """x*-1.5 - y is one fused multiply-add in one kernel and two roundings in another, as a C compiler chooses: the
  max's gradient compares stored values with their max, or the elements equal to the max could get none of it."""
  def lse_rows(r):  # logsumexp of each row of a 2-d Ref
    n = r.shape[1]
    rows = [r.vals[i:i + n] for i in range(0, len(r.vals), n)]
    return Ref([max(v) + math.log(math.fsum(math.exp(e - max(v)) for e in v)) for v in rows], (len(rows), 1))
  def tiny_fn(x, y):
    return (x.pad(((2, 1), (0, 0))).flip(1) * -1.5 - y).max(0, keepdim=True).pad(((2, 0), (2, 0))).logsumexp(-1, True)
  def ref_fn(x, y):
    top = x.pad(((2, 1), (0, 0))).flip((1,)).map(lambda v: v * -1.5).map(operator.sub, y).reduce((0,), max, -math.inf)
    return lse_rows(top.pad(((2, 0), (2, 0))))
  rng = random.Random(1164)
  check_gradient(tiny_fn, ref_fn, (_vals(rng, 16, -1.5, 1.5), (4, 4)), (_vals(rng, 28, -1.5, 1.5), (7, 4)),
                 rtol=3e-3, atol=3e-4)

GRAD_RUNS = [("CPU", seed) for seed in range(24)] + [("PYTHON", seed) for seed in range(100, 106)]

@pytest.mark.parametrize("device, seed", GRAD_RUNS, ids=[f"{d}-{s}" for d, s in GRAD_RUNS])
def test_random_differentiable_program_matches_finite_differences(device, seed):
  shapes, steps, tiny_fn, ref_fn = _random_differentiable_program(seed)
  print(f"seed {seed}: inputs {shapes}, steps {[(k, a) for k, a, _ in steps]}")
  rng = random.Random(seed + 1000)
  check_gradient(tiny_fn, ref_fn, *[(_vals(rng, math.prod(s), -1.5, 1.5), s) for s in shapes], device=device,
                 rtol=3e-3, atol=3e-4)

# --- assign: a lazy write into a tensor's own buffer

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_assign_writes_in_place_when_realized(device):
  a = Tensor([1.0, 2.0, 3.0], device=device)
  buf = a.buffer()
  a.assign(a * 10 + 1)
  assert buf.copyout() == struct.pack("3f", 1.0, 2.0, 3.0)  # lazy: nothing written yet
  assert a.tolist() == [11.0, 21.0, 31.0] and a.buffer() is buf

def test_aliases_of_one_buffer_follow_every_write():
  """Tensors that hold one buffer (whole, or a view of it) follow each write into it, however many (t followed the
  first of h's writes only); the value written, a view of the buffer, shows the write; a value computed from the
  buffer keeps what it was; a view of a pending write, realized, stays a view. (As torch's, numpy's.)"""
  t = Tensor([[1.0, 2.0, 3.0]]).realize()
  h = t.T.T
  h += 1
  h += 1
  h.assign(t * 10)
  assert t.tolist() == h.tolist() == [[30.0, 40.0, 50.0]]
  t = Tensor([[4.0, -3.0], [-4.0, -4.0]]).realize()
  h = t.T.T
  h *= 2
  h += 1
  (t + t).contiguous().realize()
  h += 100
  assert t.tolist() == h.tolist() == [[109.0, 95.0], [93.0, 93.0]]
  t = Tensor([[-2.0, 1.0, 5.0]]).realize()
  flipped = t.flip(1)
  t.assign(flipped)
  assert t.tolist() == [[5.0, 1.0, -2.0]] and flipped.tolist() == [[-2.0, 1.0, 5.0]]
  t = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).realize()
  part = t[:, 1:]
  doubled = part * 2
  part.assign(doubled)
  assert t.tolist() == [[1.0, 4.0, 6.0], [4.0, 10.0, 12.0]] and doubled.tolist() == [[4.0, 6.0], [10.0, 12.0]]
  t += 1
  row = t.T[1:]
  row.realize()
  t *= 2
  assert row.tolist() == [[10.0, 22.0], [14.0, 26.0]] and doubled.tolist() == [[4.0, 6.0], [10.0, 12.0]]

def test_views_stay_views_read_detached_made_contiguous_or_made_twice():
  t = Tensor([[1.0], [2.0], [3.0]]).realize()
  r = t.reshape(3)
  t += 10
  d = r.detach()  # (of a view of a pending write: it became a copy)
  t.assign(Tensor.full((3, 1), 5.0))
  assert d.tolist() == [5.0] * 3
  t = Tensor([1.0, 2.0]).realize()
  e = t.unsqueeze(0).expand(2, 2)
  assert e.tolist() == [[1.0, 2.0]] * 2  # (read: it became a copy)
  t[0:1] = 7
  assert e.tolist() == [[7.0, 2.0]] * 2
  t = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  t += 1
  c = t.reshape(2, 2).contiguous()  # (all of a pending write: itself, as torch's contiguous of a contiguous tensor)
  t.assign(Tensor.zeros(4))
  assert c.tolist() == [[0.0, 0.0], [0.0, 0.0]]
  t = Tensor([1.0, 2.0, 3.0]).realize()
  a, b = t.reshape(1, 3), t.reshape(1, 3)  # (equal views of one tensor: b was copied at a's write)
  a += 1
  b += 1
  assert t.tolist() == [3.0, 4.0, 5.0] and a.tolist() == b.tolist() == [[3.0, 4.0, 5.0]]
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  t = (x * 2).realize()
  t *= 3
  t.tolist()  # (the write realized: t's gradient passes through it, and t's old value through x * 2, as torch's)
  t.sum().backward()
  assert x.grad.tolist() == [6.0, 6.0, 6.0]

def test_tensors_computed_before_an_assign_keep_their_values_and_views_show_it():  # (as torch's, numpy's)
  a = Tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(2, 3).contiguous().realize()
  doubled, moved, flipped, part = a * 2, a.T, a.flip(1), a[1, ::2]  # lazy, each reading a's buffer
  a.assign(Tensor([[7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]))
  assert a.tolist() == [[7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]
  assert doubled.tolist() == [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]
  assert moved.tolist() == [[7.0, 10.0], [8.0, 11.0], [9.0, 12.0]] and part.tolist() == [10.0, 12.0]
  assert flipped.tolist() == [[9.0, 8.0, 7.0], [12.0, 11.0, 10.0]]
  a += 1  # (and the views, realized, still do)
  assert moved.tolist()[0] == [8.0, 11.0] and part.tolist() == [11.0, 13.0] and flipped.tolist()[0] == [10.0, 9.0, 8.0]

def test_assign_from_its_own_buffer_moved_or_reduced_reads_the_old_values():
  w = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]).contiguous().realize()
  assert w.assign(w.T).tolist() == [[1.0, 4.0, 7.0], [2.0, 5.0, 8.0], [3.0, 6.0, 9.0]]
  assert w.assign(w - w.sum(1, keepdim=True)).tolist() == [[-11.0, -8.0, -5.0], [-13.0, -10.0, -7.0],
                                                          [-15.0, -12.0, -9.0]]
  assert w.assign(w.flip(0).flip(1)).tolist() == [[-9.0, -12.0, -15.0], [-7.0, -10.0, -13.0], [-5.0, -8.0, -11.0]]

def test_assigns_chain_and_each_runs_once():
  m = Tensor.zeros(5)  # not a buffer yet: assign gives it one
  m.assign(m + 1)
  m.assign(m * 3)
  reader = m + 0  # reads the second assign
  assert reader.tolist() == [3.0] * 5 and m.tolist() == [3.0] * 5
  m.assign(m + 1)
  assert (m * 1).tolist() == [4.0] * 5 and m.tolist() == [4.0] * 5  # realized through a reader, not again by m

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_assign_from_a_move_of_what_its_buffer_computes_reads_the_old_values(device):
  """The move may sit over a computed node ((-a).flip(0)), or over an assign not yet run: the value is stored first,
  or the kernel would read rows it had already written."""
  rows = [[3.0 * i + j for j in range(3)] for i in range(7)]
  a, b = Tensor(rows, device=device), Tensor(rows, device=device)
  a.assign((-a).flip(0))
  b.assign(b * 2 + (b * 3).flip(0))
  c = Tensor([float(v) for v in range(17)], device=device)
  c.assign(c + 1)
  c.assign(c.flip(0) * 2)
  assert a.tolist() == [[-v for v in row] for row in rows[::-1]]
  assert b.tolist() == [[2 * x + 3 * y for x, y in zip(r, s)] for r, s in zip(rows, rows[::-1])]
  assert c.tolist() == [2.0 * (v + 1) for v in reversed(range(17))]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_second_assign_that_reads_nothing_of_the_first_still_runs_after_it(device):
  """b[:] = v is v where an all-true mask holds, else b: once the mask folds, the second assign reads nothing of the
  first, and in one kernel the first's loads and store came after the second's store."""
  for first in (lambda b: b.assign(b * 3), lambda b: b.__iadd__(b)):
    b, c = Tensor([-1.0, -2.0, -3.0], device=device), Tensor([1.0, 2.0, 3.0], device=device)
    first(b)
    b[0:3] = c * 2
    assert b.tolist() == [2.0, 4.0, 6.0]
  b = Tensor([-1.0, -2.0, -3.0], device=device)
  b.assign(b * 3)
  b.assign(Tensor.ones(3, dtype=dtypes.bool, device=device).where(c, b))
  assert b.tolist() == [1.0, 2.0, 3.0]

def test_a_jit_capture_does_not_run_again_an_assign_run_before_it():
  """A tensor read from a's assign in one call and kept is realized by the next call's assign (its value as it was):
  inside the capture, that assign is its buffer, not a second write of a - x."""
  a, kept = Tensor([0.0, 0.0, 0.0]).contiguous().realize(), []
  @tiny.TinyJit
  def step(x):
    a.assign(a - x)
    kept.append(a + 1.0)  # never read
    a.realize()
    return x * 1.0
  for i in range(5):
    step(Tensor([1.0, 1.0, 1.0]))
    assert a.tolist() == [-1.0 - i] * 3

def test_an_assign_equal_to_one_done_before_is_done_again():
  """b += SH(b) twice builds one ASSIGN node (hash-consing), which a tensor read from the first and kept still holds:
  the second is a write still to do, not the first one's buffer. Inside a TinyJit capture, both of a's slice writes
  and b's were skipped."""
  b, kept = Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).realize(), []
  a = Tensor.zeros(3, 2).contiguous().realize()
  def step(x):
    b.assign(b + b.pad(((1, 0), (0, 0)))[:-1])  # each row plus the one above it
    kept.append(b * 0.5)  # never read
    a[0:2] = b[1:3] * 2
    Tensor.realize(a, b)
    return x * 1.0
  want_b, jitted = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], tiny.TinyJit(step)
  for _ in range(4):
    jitted(Tensor([1.0]))
    want_b = [want_b[0]] + [[v + u for v, u in zip(row, above)] for row, above in zip(want_b[1:], want_b)]
    assert b.tolist() == want_b and a.tolist()[:2] == [[v * 2 for v in row] for row in want_b[1:]]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_the_value_an_assign_writes_keeps_it_after_later_writes(device):
  """d = a * 2; a.assign(d): d read after a is written (and written again) is still what was written, as where ops run
  at once: not its graph over the buffer the write changed (a * 2 of the new a)."""
  a = Tensor([1.0, 2.0, 3.0], device=device).realize()
  d = a * 2
  a.assign(d)
  a.realize()
  assert d.tolist() == [2.0, 4.0, 6.0]
  a.assign(a + 10)
  assert a.tolist() == [12.0, 14.0, 16.0] and d.tolist() == [2.0, 4.0, 6.0]
  rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
  b = Tensor(rows, device=device).realize()
  flipped = b.flip(1) * 1
  b.assign(flipped)
  b.assign(b * 0)
  assert b.tolist() == [[0.0] * 3] * 2 and flipped.tolist() == [row[::-1] for row in rows]
  view = b.flip(1)  # (a view of b, written into b: it shows the write, and the next)
  b.assign(view + 1)
  assert view.tolist() == [[1.0] * 3] * 2
  b.assign(b * 3)
  assert view.tolist() == [[3.0] * 3] * 2
  c, e = Tensor([1.0, 2.0], device=device).realize(), Tensor([5.0, 6.0], device=device).realize()
  e.assign(c * 2)  # an assign's x that holds a buffer of its own keeps it: e is written, and stays e
  c.assign(e)
  assert c.tolist() == [2.0, 4.0] and e.tolist() == [2.0, 4.0]

def test_tensors_of_one_graph_hold_their_own_buffers_once_written():
  """Equal graphs are one node, realized once: two LayerNorms' ones(4), or x*2 built twice. A write into one (an
  optimizer's step, an assign) leaves the other as it was, and each parameter gets its own gradient."""
  l1, l2 = tiny.nn.LayerNorm(4), tiny.nn.LayerNorm(4)
  params = tiny.nn.state.get_parameters([l1, l2])
  Tensor.realize(*params)
  x = Tensor([[1.0, 2.0, 3.0, 4.0]])
  loss = (l1(x) * Tensor([[1.0, 0.0, 0.0, 0.0]])).sum() + (l2(x) * Tensor([[0.0, 1.0, 0.0, 0.0]])).sum()
  opt = tiny.nn.optim.SGD(params, lr=0.5)
  loss.backward()
  opt.step()
  xhat = [(v - 2.5) / math.sqrt(1.25 + 1e-5) for v in (1.0, 2.0, 3.0, 4.0)]  # (the layer's normalized x)
  assert_close(l1.weight.tolist(), [1 - 0.5 * xhat[0], 1.0, 1.0, 1.0])
  assert_close(l2.weight.tolist(), [1.0, 1 - 0.5 * xhat[1], 1.0, 1.0])
  x = Tensor([1.0, 2.0, 3.0]).realize()
  a, b = x * 2, x * 2
  Tensor.realize(a, b)
  a.assign(a + 10)
  assert a.tolist() == [12.0, 14.0, 16.0] and b.tolist() == [2.0, 4.0, 6.0]
  c, d = Tensor(3.0).contiguous().realize(), Tensor(3.0).contiguous().realize()
  c.assign(c + 10)
  assert (c.item(), d.item()) == (13.0, 3.0)

def test_a_write_through_a_view_of_one_of_two_equal_graphs_leaves_the_other():
  """Equal graphs realized into one buffer: a write through a view of one (an index, a slice's +=, a transpose, a
  reshape, a detach) is a write into that one only."""
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).realize()
  rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
  for write, expected in [(lambda t: t.__setitem__((1, 2), 0.0), [[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]]),
                          (lambda t: t[0, :2].assign(t[0, :2] + 1), [[2.0, 3.0, 3.0], [4.0, 5.0, 6.0]]),
                          (lambda t: t.T.__setitem__((2, 1), 9.0), [[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]]),
                          (lambda t: t.reshape(3, 2).__setitem__(0, Tensor([7.0, 8.0])), [[7.0, 8.0, 3.0],
                                                                                         [4.0, 5.0, 6.0]]),
                          (lambda t: t.detach().flatten()[4:].assign(Tensor([0.0, 0.0])), [[1.0, 2.0, 3.0],
                                                                                          [4.0, 0.0, 0.0]])]:
    a, b = x * 1.0, x * 1.0
    Tensor.realize(a, b)
    write(b)
    assert (a.tolist(), b.tolist()) == (rows, expected)
  y = x.contiguous()  # (one tensor's buffer, shared as torch's: a write through a view of y shows in x)
  y.T[0, 1] = -1.0
  assert x.tolist()[1][0] == -1.0

def test_views_of_one_of_two_equal_graphs_stay_its_views_after_a_write_into_the_other():
  """Equal graphs realized into one buffer, and views taken from one (a row, a transpose, a reshape, a detach, a flip):
  a write into the other leaves them, and a write through them writes the one they were taken from."""
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).realize()
  for view, row in [(lambda t: t[0], [1.0, 2.0, 3.0]), (lambda t: t.T, [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]),
                    (lambda t: t.reshape(3, 2), [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
                    (lambda t: t.detach(), [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
                    (lambda t: t.flip(0), [[4.0, 5.0, 6.0], [1.0, 2.0, 3.0]])]:
    a, b = x * 1.0, x * 1.0
    Tensor.realize(a, b)
    seen = view(a)
    b[0, 1] = 100.0
    assert seen.tolist() == row and a.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    seen.flatten()[0].assign(-1.0)
    assert view(a).flatten().tolist()[0] == -1.0 and b.tolist() == [[1.0, 100.0, 3.0], [4.0, 5.0, 6.0]]

def test_a_view_that_reads_padding_keeps_what_it_read_through_later_writes():  # (torch's pad is a copy)
  def shifted(x): return x.pad(((1, 0), (0, 0)))[:-1]  # (rows down one, a row of zeros on top)
  t = Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).realize()
  p = shifted(t)
  t += 10
  assert p.tolist() == [[0, 0], [1, 2], [3, 4]] and t.tolist() == [[11, 12], [13, 14], [15, 16]]
  t += 1  # (a write pending when the view is taken, another after it)
  q = shifted(t)
  t[0, 0] = 100
  assert q.tolist() == [[0, 0], [12, 13], [14, 15]] and t.tolist() == [[100, 13], [14, 15], [16, 17]]
  u = t * 2  # (a view of a tensor not computed yet)
  r = shifted(u)
  u += 5
  assert r.tolist() == [[0, 0], [200, 26], [28, 30]] and u.tolist() == [[205, 31], [33, 35], [37, 39]]

def test_views_of_a_tensor_not_yet_computed_are_its_views_through_writes():
  """A view taken from a tensor that has no buffer yet (a graph, a constant) reads its graph; a write into the tensor
  shows in the view, and a write through the view writes the tensor, as where the tensor had a buffer (torch's)."""
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  t = Tensor.zeros(2, 3)
  t[1][2] = 5.0  # (t[1] is a view of a constant)
  assert t.tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 5.0]]
  t = x * 2
  row, column, total = t[0], t[:, 1], t.sum()
  row[1] = -1.0
  assert t.tolist() == [[2.0, -1.0, 6.0], [8.0, 10.0, 12.0]] and column.tolist() == [-1.0, 10.0]
  assert total.item() == 42.0  # (computed from t before the write)
  t = x * 2
  flat, back = t.reshape(3, 2), t.T
  t += 1
  assert flat.tolist() == [[3.0, 5.0], [7.0, 9.0], [11.0, 13.0]]
  back[2, 0] = 0.0
  assert t.tolist() == [[3.0, 5.0, 0.0], [9.0, 11.0, 13.0]] and flat.tolist()[1] == [0.0, 9.0]
  t = x * 2
  row = t[1]
  t.realize()  # (computed after the view was taken)
  row[0] = 7.0
  assert t.tolist() == [[2.0, 4.0, 6.0], [7.0, 10.0, 12.0]]
  t = x * 2
  back, flat = t.T, t.flatten()
  back.realize()  # (realized alone: t is computed, and back is a view of it)
  back[0, 1] = 9.0
  flat += 1
  assert t.tolist() == [[3.0, 5.0, 7.0], [10.0, 11.0, 13.0]] and back.tolist()[0] == [3.0, 10.0]
  rows = Tensor.arange(12.0).reshape(3, 4).realize()
  rows[::2][:, 1::2] = 0.0  # (a strided slice pads, then cuts the padding away: a view of the buffer still)
  assert rows.tolist() == [[0.0, 0.0, 2.0, 0.0], [4.0, 5.0, 6.0, 7.0], [8.0, 0.0, 10.0, 0.0]]
  for t in (x * 2, (x * 2).realize()):  # (a pad is written as a copy of its own, as torch's F.pad makes one)
    padded = t.pad(((1, 1), (0, 0)))
    padded[0, 0], padded[1, 0] = 100.0, -1.0
    assert padded.tolist()[:2] == [[100.0, 0.0, 0.0], [-1.0, 4.0, 6.0]] and t.tolist()[0] == [2.0, 4.0, 6.0]
  t = x * 2
  back = t.T
  assert back.tolist() == [[2.0, 8.0], [4.0, 10.0], [6.0, 12.0]]  # (read: t is computed, and back is a view of it)
  t[0, 0] = -1.0
  assert back.tolist()[0] == [-1.0, 8.0]
  w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  t = w * w
  t[1:][0] = 0.0  # (the gradient passes by what the write replaced)
  t.sum().backward()
  assert w.grad.tolist() == [2.0, 0.0, 6.0]

def test_a_detach_of_a_moved_view_shares_the_buffer():
  """t.T.detach() and t[1:, ::2].detach() share t's buffer as torch's: writes show both ways, computed or not."""
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  for realized in (True, False):
    w = (x * 1.0).realize() if realized else x * 1.0
    back, part = w.T.detach(), w[:, ::2].detach()
    w += 1
    assert back.tolist() == [[2.0, 5.0], [3.0, 6.0], [4.0, 7.0]] and part.tolist() == [[2.0, 4.0], [5.0, 7.0]]
    back[0, 1] = 50.0
    part[0, 1] = -4.0
    assert w.tolist() == [[2.0, 3.0, -4.0], [50.0, 6.0, 7.0]]
  w = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
  y = w * 2
  y.T.detach()[0, 1] = 0.0  # (written as torch's: the gradient of y * y reads the value written)
  (y * y).sum().backward()
  assert y.tolist() == [[2.0, 4.0, 6.0], [0.0, 10.0, 12.0]]
  assert w.grad.tolist() == [[8.0, 16.0, 24.0], [0.0, 40.0, 48.0]]
  for realized in (True, False):  # (a detach of a tensor written after: the write's values, still detached)
    x = Tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], requires_grad=True)
    h = (x * 2).realize() if realized else x * 2
    d = h.detach()
    h += 1
    assert d.tolist()[1] == [7.0, 9.0, 11.0] and (d * 2 + x).sum().gradient(x)[0].tolist() == [[1.0] * 3] * 2
  w.grad = None
  y = w * 2
  y[1] = 0.0
  y[0] = y[0].detach()  # (a write of its own values, detached: the gradient stops there, as torch's)
  (y * y).sum().backward()
  assert w.grad.tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]

def test_equal_leaves_that_require_grad_get_their_own_gradients():  # (one node, until each has a buffer of its own)
  a, b = Tensor(1.0, requires_grad=True), Tensor(1.0, requires_grad=True)
  (a * 2 + b * 3).backward()
  assert (a.grad.item(), b.grad.item()) == (2.0, 3.0)
  c, d = Tensor.zeros(2, requires_grad=True), Tensor.zeros(2, requires_grad=True)
  (c * 2 + d * 3).sum().backward()
  assert (c.grad.tolist(), d.grad.tolist()) == ([2.0, 2.0], [3.0, 3.0])
  a = Tensor([1.0, 2.0])
  x, y = a * 2, a * 2  # leaves computed alike (from nothing that requires grad)
  x.requires_grad, y.requires_grad = True, True
  (x * 3 + y * 5).sum().backward()
  assert (x.grad.tolist(), y.grad.tolist(), x.tolist()) == ([3.0, 3.0], [5.0, 5.0], [2.0, 4.0])
  w = Tensor([1.0, 2.0], requires_grad=True)
  h = w * 2  # computed from one that requires grad: not a leaf, its gradient reaches w
  h.requires_grad = True
  (h * h).sum().backward()
  assert (w.grad.tolist(), h.grad.tolist()) == ([8.0, 16.0], [4.0, 8.0])

def test_nll_loss_of_one_sample_and_batchnorm_of_one_value_per_channel():  # as torch's
  logp = [math.log(v) for v in (0.2, 0.5, 0.3)]
  for reduction in ("mean", "sum", "none"):
    got = Tensor(logp).nll_loss(Tensor(1), reduction=reduction)
    assert got.shape == () and math.isclose(got.item(), -logp[1], rel_tol=1e-6)
  with Tensor.train(), pytest.raises(ValueError, match="more than 1 value per channel"):
    tiny.nn.BatchNorm(3)(Tensor([[1.0, 2.0, 3.0]]))
  b1, b2 = tiny.nn.BatchNorm(2), tiny.nn.BatchNorm(2)  # their running means: zeros(2) each, one node until written
  with Tensor.train():
    b1(Tensor([[1.0, 2.0], [3.0, 4.0]]))
    b2(Tensor([[0.0, 6.0], [2.0, 8.0]]))
  assert_close(b1.running_mean.tolist(), [0.2, 0.3])
  assert_close(b2.running_mean.tolist(), [0.1, 0.7])

def test_optimizers_step_a_0d_parameter():  # against each update written out: p*p*3 has gradient 6p
  for name in ("SGD", "Adam"):
    p = Tensor(1.0, requires_grad=True)
    opt = getattr(tiny.nn.optim, name)([p], lr=0.1)
    want, m, v = 1.0, 0.0, 0.0
    for step in range(1, 4):
      opt.zero_grad()
      (p * p * 3).backward()
      opt.step()
      g = 6 * want
      if name == "SGD": want -= 0.1 * g
      else:
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        want -= 0.1 * (m / (1 - 0.9 ** step)) / (math.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
      assert p.shape == () and math.isclose(p.item(), want, rel_tol=1e-5), (name, step, p.item(), want)

def test_optimizers_check_their_settings_keep_float32_state_and_name_it_as_tinygrad():
  w = Tensor([1.0, 2.0], requires_grad=True)
  for make in (lambda: tiny.nn.optim.SGD([w], lr=-1.0), lambda: tiny.nn.optim.SGD([w], momentum=-0.5),
               lambda: tiny.nn.optim.SGD([w], weight_decay=-1.0), lambda: tiny.nn.optim.AdamW([w], weight_decay=-1.0)):
    with pytest.raises(ValueError, match="Invalid"): make()
  with pytest.raises(AssertionError, match="at least one param"): tiny.nn.optim.Adam([])
  opt = tiny.nn.optim.Adam([w, w], lr=0.1)  # (a parameter given twice is stepped once)
  assert {k: v.shape for k, v in tiny.nn.state.get_state_dict(opt).items()} == \
    {"params.0": (2,), "lr": (1,), "m.0": (2,), "v.0": (2,), "b1_t": (1,), "b2_t": (1,)}
  # a float16 parameter's moments are float32 (its gradient's square, 1e-10, is 0 in float16: the step was ~1e3 x lr)
  h = Tensor([[0.5, -0.25]], dtype=dtypes.float16, requires_grad=True)
  opt = tiny.nn.optim.Adam([h], lr=0.01)
  (Tensor([[1e-3, 2e-3]], dtype=dtypes.float16) * h).sum().mul(1e-2).backward()
  opt.step()
  assert opt.m[0].dtype == dtypes.float32 and h.dtype == dtypes.float16
  assert_close(h.tolist(), [[0.49, -0.26]], rtol=1e-3)
  # an int learning rate is a float one; a float set in its place is read as one
  p = Tensor([1.0, 2.0], requires_grad=True)
  sgd = tiny.nn.optim.SGD([p], lr=1)
  assert sgd.lr.dtype == dtypes.float32
  sgd.lr *= 0.5
  (p * p).sum().backward()
  sgd.step()
  assert p.tolist() == [0.0, 0.0]
  sgd.lr, p.grad = 0.25, Tensor([4.0, -4.0])
  sgd.step()
  assert p.tolist() == [-1.0, 1.0]

@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_an_optimizer_step_leaves_what_read_its_buffers_before_it_as_it_was(name):
  """Tensors computed, not yet realized, from a parameter or the optimizer's state before its step keep the values
  they had then (the step writes every buffer of both in place)."""
  p = Tensor([1.0, -2.0], requires_grad=True)
  opt = getattr(tiny.nn.optim, name)([p], lr=0.5, **({"momentum": 0.9} if name == "SGD" else {}))
  for _ in range(2):
    opt.zero_grad()
    (p * p).sum().backward()
    twice_p, state = p * 2, [t * 1 for t in opt.state]
    p_then, state_then = p.tolist(), [t.tolist() for t in opt.state]
    opt.step()
    assert p.tolist() != p_then and twice_p.tolist() == [2 * v for v in p_then]
    assert [t.tolist() for t in state] == state_then

@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_a_loss_before_a_step_keeps_its_value_when_its_parameter_was_computed(name):
  """A parameter made by a graph (Tensor.uniform(..., requires_grad=True)) gets a buffer of its own by a write still
  pending at the step: the loss built before the step, realized after it, has the value of the parameter before."""
  Tensor.manual_seed(3)
  values = flat(Tensor.uniform(2, 3, low=-1.0, high=1.0).tolist())
  Tensor.manual_seed(3)
  p = Tensor.uniform(2, 3, low=-1.0, high=1.0, requires_grad=True)
  loss = (p * p).sum()
  loss.backward()
  getattr(tiny.nn.optim, name)([p], lr=0.25).step()
  assert_close(loss.item(), sum(v * v for v in values), rtol=1e-6)
  if name == "SGD": assert_close(flat(p.tolist()), [v - 0.25 * 2 * v for v in values], rtol=1e-6)

def test_assign_checks_shape_and_device():
  a = Tensor([1.0, 2.0])
  with pytest.raises(tiny.ShapeError, match="shape"): a.assign(Tensor([1.0, 2.0, 3.0]))
  with pytest.raises(ValueError, match="PYTHON"): a.assign(Tensor([1.0, 2.0], device="PYTHON"))
  assert a.assign(Tensor([7, 8])).tolist() == [7.0, 8.0]  # cast to a's dtype, as a copy into it would
  b = Tensor.zeros(3, 2).contiguous().realize()
  assert b.assign(Tensor([1.0, 2.0])).tolist() == [[1.0, 2.0]] * 3  # broadcast, as torch's copy_ and tinygrad's
  with pytest.raises(tiny.ShapeError, match="shape"): b.assign(Tensor.ones(2, 3, 2))
  b[1:] = [[5, 6], [7, 8]]  # (a list, as a tensor of it)
  assert b.tolist() == [[1.0, 2.0], [5.0, 6.0], [7.0, 8.0]]


# --- optimizers: each against the same update written in pure Python, on a loss whose gradient is known

def _quadratic_steps(make_opt, ref_update, steps=4, device="CPU"):
  """Minimizes sum(c * p^2 + p) over odd shapes; the reference applies ref_update(state, p, g) to each element."""
  rng = random.Random(11)
  shapes = [(3, 5), (7,)]
  inits = [[rng.uniform(-2, 2) for _ in range(math.prod(s))] for s in shapes]
  coefs = [[rng.uniform(0.5, 2) for _ in range(math.prod(s))] for s in shapes]
  params = [Tensor(v, device=device, requires_grad=True).reshape(s).contiguous().realize()
            for v, s in zip(inits, shapes)]
  for p in params: p.requires_grad = True
  opt = make_opt(params)
  for _ in range(steps):
    opt.zero_grad()
    sum(((p * p * Tensor(c, device=device).reshape(p.shape)) + p).sum() for p, c in zip(params, coefs)).backward()
    opt.step()
  for p, vals, cs in zip(params, inits, coefs):
    want = []
    for v, c in zip(vals, cs):
      state = {}
      for t in range(1, steps + 1): v = ref_update(state, v, 2 * c * v + 1, t)
      want.append(v)
    assert_close(flat(p.tolist()), want, rtol=2e-5, atol=2e-5)

def _sgd(lr, momentum=0.0, wd=0.0, nesterov=False):
  def update(state, p, g, t):
    g = g + wd * p
    if momentum:
      state["b"] = momentum * state.get("b", 0.0) + g
      g = g + momentum * state["b"] if nesterov else state["b"]
    return p - lr * g
  return update

def _adam(lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False):
  def update(state, p, g, t):
    if not decoupled: g = g + wd * p
    state["m"] = b1 * state.get("m", 0.0) + (1 - b1) * g
    state["v"] = b2 * state.get("v", 0.0) + (1 - b2) * g * g
    up = state["m"] / (1 - b1 ** t) / (math.sqrt(state["v"] / (1 - b2 ** t)) + eps)
    return p - lr * (up + wd * p if decoupled else up)
  return update

OPTIMIZERS = [
  ("sgd", lambda ps: tiny.nn.optim.SGD(ps, lr=0.05), _sgd(0.05)),
  ("sgd_momentum_wd", lambda ps: tiny.nn.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.1), _sgd(0.05, 0.9, 0.1)),
  ("sgd_nesterov", lambda ps: tiny.nn.optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=True), _sgd(0.05, 0.8, 0.0, True)),
  ("adam", lambda ps: tiny.nn.optim.Adam(ps, lr=0.1), _adam(0.1)),
  ("adam_l2", lambda ps: tiny.nn.optim.Adam(ps, lr=0.1, b1=0.8, weight_decay=0.2), _adam(0.1, b1=0.8, wd=0.2)),
  ("adamw", lambda ps: tiny.nn.optim.AdamW(ps, lr=0.1), _adam(0.1, wd=0.01, decoupled=True))]

@pytest.mark.parametrize("name,make,ref", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_optimizer_step_matches_its_update_rule(name, make, ref):
  _quadratic_steps(make, ref)

def test_lamb_scales_each_tensors_step_by_its_trust_ratio():  # on sum(c * p^2 + p), each tensor in pure Python
  rng = random.Random(12)
  shapes = [(3, 5), (7,), (2,)]
  inits = [[rng.uniform(-2, 2) for _ in range(math.prod(s))] for s in shapes]
  inits[2] = [0.0, 0.0]  # |p| is 0: a trust ratio of 1
  coefs = [[rng.uniform(0.5, 2) for _ in range(math.prod(s))] for s in shapes]
  for adam in (False, True):
    params = [Tensor(v).reshape(s).contiguous().realize() for v, s in zip(inits, shapes)]
    for p in params: p.requires_grad = True
    opt = tiny.nn.optim.LAMB(params, lr=0.1, weight_decay=0.05, adam=adam)
    want, m, v = [list(x) for x in inits], [[0.0] * len(x) for x in inits], [[0.0] * len(x) for x in inits]
    for t in range(1, 4):
      opt.zero_grad()
      sum(((p * p * Tensor(c).reshape(p.shape)) + p).sum() for p, c in zip(params, coefs)).backward()
      opt.step()
      for k, (ps, cs) in enumerate(zip(want, coefs)):
        gs = [2 * c * p + 1 for p, c in zip(ps, cs)]
        m[k] = [0.9 * a + 0.1 * g for a, g in zip(m[k], gs)]
        v[k] = [0.999 * a + 0.001 * g * g for a, g in zip(v[k], gs)]
        up = [a / (1 - 0.9 ** t) / (math.sqrt(b / (1 - 0.999 ** t)) + 1e-6) + 0.05 * p
              for a, b, p in zip(m[k], v[k], ps)]
        r1, r2 = math.sqrt(sum(p * p for p in ps)), math.sqrt(sum(u * u for u in up))
        ratio = r1 / r2 if r1 > 0 and r2 > 0 and not adam else 1.0
        want[k] = [p - 0.1 * ratio * u for p, u in zip(ps, up)]
    for p, w in zip(params, want): assert_close(flat(p.tolist()), w, rtol=2e-5, atol=2e-5)

def test_adam_on_the_emulator():
  _quadratic_steps(lambda ps: tiny.nn.optim.Adam(ps, lr=0.1), _adam(0.1), steps=2, device="PYTHON")

def test_step_without_a_gradient_raises():
  p = Tensor([1.0, 2.0], requires_grad=True)
  with pytest.raises(RuntimeError, match="no gradient"): tiny.nn.optim.SGD([p]).step()

@pytest.mark.parametrize("opt", ["SGD", "Adam"])
def test_jitted_training_steps_equal_eager_ones_bit_for_bit(opt):
  def train(jit):
    rng = random.Random(2)
    w1 = Tensor([rng.uniform(-1, 1) for _ in range(13 * 7)], requires_grad=True).reshape(13, 7).contiguous().realize()
    w2 = Tensor([rng.uniform(-1, 1) for _ in range(7 * 3)], requires_grad=True).reshape(7, 3).contiguous().realize()
    w1.requires_grad = w2.requires_grad = True
    optimizer = getattr(tiny.nn.optim, opt)([w1, w2], lr=0.05)
    def step(x, y):
      optimizer.zero_grad()
      loss = -((x @ w1).relu() @ w2).log_softmax(-1).mul(y).sum(-1).mean()
      loss.backward()
      optimizer.step()
      return loss
    fn = tiny.TinyJit(step) if jit else step
    xs = [Tensor([random.Random(i).uniform(-1, 1) for _ in range(5 * 13)]).reshape(5, 13) for i in range(3)]
    ys = [Tensor([[float(j == (i + k) % 3) for j in range(3)] for k in range(5)]) for i in range(3)]
    losses = [fn(xs[i % 3], ys[i % 3]).item() for i in range(100)]
    return losses, w1.tolist(), w2.tolist(), [t.tolist() for t in optimizer.state]
  eager, jitted = train(False), train(True)
  assert eager == jitted and eager[0][-1] < eager[0][0]


# --- composites: built once per structure of their inputs, made again over each call's, node for node

def composite_inputs():
  w = Tensor(rand_list((13, 7), 90)).realize()
  return {"buffer": w, "moved": w.T.reshape(7, 13).permute(1, 0)[2:11], "lazy": w * 2 + 1,
          "expanded": Tensor([1.5, -2.0, 0.25, 3.0, -1.0, 0.5, 2.0]).reshape(1, 7).expand(13, 7)}

@pytest.mark.parametrize("kind", ["buffer", "moved", "lazy", "expanded"])
def test_a_composite_builds_the_graph_its_method_would(kind):
  x = composite_inputs()[kind]
  b = Tensor(rand_list((5,), 91)).realize()
  w = Tensor(rand_list((x.shape[-1], 5), 92)).realize()
  kernel, labels = Tensor(rand_list((2, 1, 3, 3), 95)).realize(), Tensor([k % x.shape[1] for k in range(x.shape[0])])
  cases = [(Tensor.softmax, (x,), {}), (Tensor.log_softmax, (x, 0), {}), (Tensor.layernorm, (x,), {"eps": 1e-3}),
           (Tensor.gelu, (x,), {}), (Tensor.var, (x, 1), {"correction": 0}), (Tensor.relu, (x,), {}),
           (Tensor.linear, (x, w, b), {}), (Tensor.linear, (x, w.T.T), {"bias": b}), (Tensor.dot, (x, w), {}),
           (Tensor.logsumexp, (x, -1, True), {}), (Tensor.mean, (x,), {}), (Tensor.sigmoid, (x,), {}),
           (Tensor.cumsum, (x, 1), {}), (Tensor.cumprod, (x, 0), {}), (Tensor.cross_entropy, (x, labels), {}),
           (Tensor.cross_entropy, (x, x.softmax()), {"label_smoothing": 0.1}),
           (Tensor.conv2d, (x.reshape(1, 1, *x.shape), kernel), {"padding": 1}),
           (Tensor.avg_pool2d, (x.reshape(1, 1, *x.shape),), {"kernel_size": 3, "padding": 1}),
           (Tensor.sparse_categorical_crossentropy, (x, labels), {"label_smoothing": 0.1}),
           (Tensor.binary_crossentropy, (x.sigmoid(), (x > 0).float()), {}),
           (Tensor.binary_crossentropy_logits, (x, (x > 0).float()), {"reduction": "sum"})]
  for method, args, kwargs in cases:
    for _ in range(2):  # the template's first call, then a call that only makes it again
      assert method(*args, **kwargs).uop is method.__wrapped__(*args, **kwargs).uop, method.__name__
  assert_close(x.softmax().tolist(), ref_softmax(x.tolist(), 1), rtol=1e-5)

def test_a_composite_takes_what_no_template_holds():
  x = Tensor(rand_list((3, 4, 5), 93))
  assert_close(x.mean(axis=[0, 2]).tolist(), [math.fsum(v for plane in x.tolist() for v in plane[j]) / 15
                                               for j in range(4)], rtol=1e-5)  # (a list: no key holds it)
  twice = tiny.composite(lambda t: t.detach() * 2)  # a detached view: made as it is each call
  for seed in range(2):
    y = Tensor(rand_list((4,), 94 + seed))
    assert twice(y).tolist() == [2 * v for v in y.tolist()]
  with pytest.raises(tiny.ShapeError): Tensor.ones(3, 4).linear(Tensor.ones(5, 2))  # its errors, every call
  with pytest.raises(tiny.ShapeError): Tensor.ones(3, 4).linear(Tensor.ones(5, 2))

# --- layers: each against a pure-Python reference, forward and gradient

def _conv_ref(x, w, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1):
  """A direct convolution over Ref arrays: every output element a sum over its window."""
  (n, c, h, wd), (o, cg, kh, kw) = x.shape, w.shape
  oh = (h + sum(padding[0]) - dilation[0] * (kh - 1) - 1) // stride[0] + 1
  ow = (wd + sum(padding[1]) - dilation[1] * (kw - 1) - 1) // stride[1] + 1
  def at(b, ch, i, j):
    i, j = i - padding[0][0], j - padding[1][0]
    return x.at((b, ch, i, j)) if 0 <= i < h and 0 <= j < wd else 0.0
  def out(idx):
    b, oc, i, j = idx
    g = oc // (o // groups)
    return sum(at(b, g * cg + ci, i * stride[0] + a * dilation[0], j * stride[1] + e * dilation[1])
               * w.at((oc, ci, a, e)) for ci in range(cg) for a in range(kh) for e in range(kw))
  return x.made((n, o, oh, ow), out)

CONV_CASES = [  # (x shape, w shape, kwargs for tiny, kwargs for the reference)
  ((2, 3, 5, 4), (4, 3, 3, 3), {}, {}),
  ((1, 2, 7, 5), (3, 2, 2, 3), dict(stride=2, padding=1), dict(stride=(2, 2), padding=((1, 1), (1, 1)))),
  ((1, 4, 5, 5), (4, 2, 3, 2), dict(groups=2, dilation=(2, 1), padding=(1, 2)),
   dict(groups=2, dilation=(2, 1), padding=((1, 1), (2, 2)))),
  ((1, 1, 5, 6), (2, 1, 3, 3), dict(padding=(1, 0, 2, 1)),  # flat: left, right, top, bottom
   dict(padding=((2, 1), (1, 0))))]

@pytest.mark.parametrize("xs,ws,kw,ref_kw", CONV_CASES)
def test_conv2d_forward_and_gradient_match_a_direct_convolution(xs, ws, kw, ref_kw):
  rng = random.Random(str(xs))
  x, w = _vals(rng, math.prod(xs)), _vals(rng, math.prod(ws))
  got = Tensor(x).reshape(xs).conv2d(Tensor(w).reshape(ws), **kw)
  want = _conv_ref(Ref(x, xs), Ref(w, ws), **ref_kw)
  assert got.shape == want.shape
  assert_close(flat(got.tolist()), want.vals, rtol=1e-5, atol=1e-5)
  check_gradient(lambda a, b: a.conv2d(b, **kw), lambda a, b: _conv_ref(a, b, **ref_kw), (x, xs), (w, ws))

def test_linear_layernorm_and_batchnorm_match_their_formulas():
  rng = random.Random(8)
  x, w, b = _vals(rng, 15), _vals(rng, 35), _vals(rng, 7)
  def linear(xr, wr, br): return xr.matmul(wr.permute((1, 0))).map(operator.add, br.reshape((1, 7)).expand((3, 7)))
  check_gradient(lambda a, c, d: a.linear(c.T, d), linear, (x, (3, 5)), (w, (7, 5)), (b, (7,)))
  def layernorm(xr):
    out = []
    for r in range(xr.shape[0]):
      row = [xr.at((r, c)) for c in range(xr.shape[1])]
      m = sum(row) / len(row); var = sum((v - m) ** 2 for v in row) / len(row)
      out += [(v - m) / math.sqrt(var + 1e-5) for v in row]
    return Ref(out, xr.shape)
  check_gradient(lambda a: a.layernorm(), layernorm, (_vals(rng, 21), (3, 7)))
  def batchnorm(xr):  # over axes 0 and 2 of (4, 3, 5): per channel
    n, c, k = xr.shape
    stats = []
    for ch in range(c):
      vals = [xr.at((i, ch, j)) for i in range(n) for j in range(k)]
      m = sum(vals) / len(vals); stats.append((m, sum((v - m) ** 2 for v in vals) / len(vals)))
    return xr.made(xr.shape, lambda idx: (xr.at(idx) - stats[idx[1]][0]) / math.sqrt(stats[idx[1]][1] + 1e-5))
  bn = tiny.nn.BatchNorm(3)
  with Tensor.train(): check_gradient(lambda a: bn(a), batchnorm, (_vals(rng, 60), (4, 3, 5)))

def test_batchnorm_keeps_running_statistics_and_uses_them_outside_training():
  rng = random.Random(12)
  vals = [rng.uniform(-3, 3) for _ in range(2 * 3 * 4)]
  bn = tiny.nn.BatchNorm(3, momentum=0.25)
  x = Tensor(vals).reshape(2, 3, 4)
  with Tensor.train(): bn(x).realize()
  per = [[vals[i * 12 + ch * 4 + j] for i in range(2) for j in range(4)] for ch in range(3)]
  means = [sum(p) / 8 for p in per]
  unbiased = [sum((v - m) ** 2 for v in p) / 7 for p, m in zip(per, means)]
  assert_close(bn.running_mean.tolist(), [0.25 * m for m in means], rtol=1e-5, atol=1e-6)
  assert_close(bn.running_var.tolist(), [0.75 + 0.25 * v for v in unbiased], rtol=1e-5, atol=1e-6)
  assert bn.num_batches_tracked.tolist() == 1 and bn.num_batches_tracked.shape == ()  # 0-d, as tinygrad's and torch's
  out = flat(bn(x).tolist())  # not training: the running statistics
  assert_close(out, [(vals[k] - 0.25 * means[k // 4 % 3]) / math.sqrt(0.75 + 0.25 * unbiased[k // 4 % 3] + 1e-5)
                     for k in range(24)], rtol=1e-5, atol=1e-5)

def test_embedding_picks_rows_and_sums_their_gradients():
  emb = tiny.nn.Embedding(5, 3)
  idx = Tensor([[4, 0], [2, 4], [-1, 1]])
  rows = emb.weight.tolist()
  out = emb(idx)
  # (an index out of range, -1 too, gives a row of zeros, as tinygrad's)
  assert out.shape == (3, 2, 3) and out.tolist() == [[rows[4], rows[0]], [rows[2], rows[4]], [[0.0] * 3, rows[1]]]
  assert emb(Tensor([5, 3, -4])).tolist() == [[0.0] * 3, rows[3], [0.0] * 3]
  out.sum().backward()
  assert emb.weight.grad.tolist() == [[1.0] * 3, [1.0] * 3, [1.0] * 3, [0.0] * 3, [2.0] * 3]
  with pytest.raises(IndexError, match="ints"): emb.weight[Tensor([1.0])]  # (tinygrad's error type)


def test_lstm_cell_steps_as_its_equations_say_and_an_optimizer_group_steps_each_optimizer():
  cell = tiny.nn.LSTMCell(3, 5)
  assert list(tiny.nn.state.get_state_dict(cell)) == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
  cell.bias_ih.assign(Tensor(rand_list((20,), 3)))
  w_ih, w_hh, b_ih, b_hh = (t.tolist() for t in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh))
  def ref(x, h, c):  # one row: gates = W_ih x + b_ih + W_hh h + b_hh, split in 4 (input, forget, cell, output)
    gates = [sum(w * v for w, v in zip(w_ih[k], x)) + b_ih[k] + sum(w * v for w, v in zip(w_hh[k], h)) + b_hh[k]
             for k in range(20)]
    sig = lambda v: 1 / (1 + math.exp(-v))
    i, f, g, o = (gates[5 * n:5 * n + 5] for n in range(4))
    c = [sig(f[k]) * c[k] + sig(i[k]) * math.tanh(g[k]) for k in range(5)]
    return [sig(o[k]) * math.tanh(c[k]) for k in range(5)], c
  xs = rand_list((2, 3), 4)
  h, c = cell(Tensor(xs))
  h, c = cell(Tensor(xs), (h, c))
  want = [ref(x, *ref(x, [0.0] * 5, [0.0] * 5)) for x in xs]
  assert_close(h.tolist(), [w[0] for w in want], rtol=1e-5)
  assert_close(c.tolist(), [w[1] for w in want], rtol=1e-5)
  a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
  group = tiny.nn.optim.OptimizerGroup(tiny.nn.optim.SGD([a], lr=0.5), tiny.nn.optim.SGD([b], lr=0.25))
  (a.sum() + 4 * b.sum()).backward()
  group.step()
  assert a.tolist() == [0.5, 1.5] and b.tolist() == [2.0] and group[1].lr.tolist() == [0.25]
  group.zero_grad()
  assert a.grad is None and b.grad is None

# --- the wider Tensor: each composite against a pure-Python reference, forward and (where it has one) gradient

def check_op(tiny_fn, ref_fn, *inputs, grad=True, rtol=1e-4, atol=1e-5, **kw):
  """tiny_fn's forward pass against ref_fn's (float64, on Ref arrays), then its gradient against finite differences."""
  got = tiny_fn(*[Tensor(vals).reshape(shape) for vals, shape in inputs])
  want = ref_fn(*[Ref(vals, shape) for vals, shape in inputs])
  assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
  assert_close(flat(got.tolist()), want.vals, rtol=rtol, atol=atol)
  if grad: check_gradient(tiny_fn, ref_fn, *inputs, **kw)

def _erf(v): return math.erf(v)
def _softplus(v): return math.log1p(math.exp(v))
def _gelu(v): return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
COMPOSITE_UNARY = [  # (name, tiny, reference, inputs' range)
  ("log10", Tensor.log10, math.log10, (0.2, 3)), ("tan", Tensor.tan, math.tan, (-1.2, 1.2)),
  ("atan", Tensor.atan, math.atan, (-6, 6)), ("asin", Tensor.asin, math.asin, (-0.95, 0.95)),
  ("acos", Tensor.acos, math.acos, (-0.95, 0.95)), ("sinh", Tensor.sinh, math.sinh, (-3, 3)),
  ("cosh", Tensor.cosh, math.cosh, (-3, 3)), ("asinh", Tensor.asinh, math.asinh, (-5, 5)),
  ("acosh", Tensor.acosh, math.acosh, (1.1, 5)), ("atanh", Tensor.atanh, math.atanh, (-0.9, 0.9)),
  ("erf", Tensor.erf, _erf, (-3, 3)), ("rsqrt", Tensor.rsqrt, lambda v: v ** -0.5, (0.2, 3)),
  ("relu6", Tensor.relu6, lambda v: min(max(v, 0), 6), (-3, 9)),
  ("hardtanh", Tensor.hardtanh, lambda v: min(max(v, -1), 1), (-3, 3)),
  ("leaky_relu", Tensor.leaky_relu, lambda v: v if v > 0 else 0.01 * v, (-3, 3)),
  ("elu", Tensor.elu, lambda v: v if v > 0 else math.exp(v) - 1, (-3, 3)),
  ("celu", lambda t: t.celu(0.7), lambda v: max(v, 0) + min(0, 0.7 * (math.exp(v / 0.7) - 1)), (-3, 3)),
  ("selu", Tensor.selu, lambda v: 1.0507 * (v if v >= 0 else 1.67326 * (math.exp(v) - 1)), (-3, 3)),
  ("silu", Tensor.silu, lambda v: v / (1 + math.exp(-v)), (-4, 4)), ("gelu", Tensor.gelu, _gelu, (-4, 4)),
  ("quick_gelu", Tensor.quick_gelu, lambda v: v / (1 + math.exp(-1.702 * v)), (-4, 4)),
  ("softplus", Tensor.softplus, _softplus, (-30, 30)),
  ("mish", Tensor.mish, lambda v: v * math.tanh(_softplus(v)), (-4, 4)),
  ("softsign", Tensor.softsign, lambda v: v / (1 + abs(v)), (-4, 4)),
  ("hardsigmoid", Tensor.hardsigmoid, lambda v: min(max(v / 6 + 0.5, 0), 1), (-5, 5)),
  ("hardswish", Tensor.hardswish, lambda v: v * min(max(v + 3, 0), 6) / 6, (-5, 5)),
  ("logsigmoid", Tensor.logsigmoid, lambda v: -_softplus(-v), (-30, 30)),
  ("pow 3", lambda t: t ** 3, lambda v: v ** 3, (-2, 2)), ("pow 0.5", lambda t: t ** 0.5, math.sqrt, (0.2, 3)),
  ("pow -1.5", lambda t: t.pow(-1.5), lambda v: v ** -1.5, (0.2, 3)),
  ("rpow", lambda t: 2.5 ** t, lambda v: 2.5 ** v, (-2, 2)),
  ("clip", lambda t: t.clip(-0.5, 0.7), lambda v: min(max(v, -0.5), 0.7), (-2, 2)),
  ("sign", Tensor.sign, lambda v: math.copysign(1, v), (-2, 2)),
  ("floor", Tensor.floor, math.floor, (-5, 5)), ("ceil", Tensor.ceil, math.ceil, (-5, 5)),
  ("trunc", Tensor.trunc, math.trunc, (-5, 5)), ("round", Tensor.round, round, (-5, 5))]  # Python's round: half to even

@pytest.mark.parametrize("name,fn,ref,span", COMPOSITE_UNARY, ids=[c[0] for c in COMPOSITE_UNARY])
def test_composite_unary_matches_its_formula(name, fn, ref, span):
  rng = random.Random(name)
  vals = [v if abs(v - round(v)) > 0.05 or name in ("floor", "ceil", "trunc", "round") else v + 0.1
          for v in _vals(rng, 21, *span)] + ([-2.5, -0.5, 0.5, 1.5, 3.0] if name == "round" else [])
  stepwise = name in ("sign", "floor", "ceil", "trunc", "round")  # (their gradient is 0 where they have one)
  check_op(fn, lambda x: x.map(ref), (vals, (len(vals),)), grad=not stepwise, rtol=2e-4, atol=2e-5)

COMPOSITE_BINARY = [
  ("pow", lambda a, b: a.abs() ** b, lambda v, e: abs(v) ** e),
  ("lerp", lambda a, b: a.lerp(b, 0.3), lambda a, b: a + (b - a) * 0.3),
  ("logaddexp", Tensor.logaddexp, lambda a, b: max(a, b) + math.log1p(math.exp(-abs(a - b)))),
  ("copysign", Tensor.copysign, math.copysign), ("fmod", Tensor.fmod, math.fmod),
  ("maximum_clip", lambda a, b: a.clip(b, None), max)]

@pytest.mark.parametrize("name,fn,ref", COMPOSITE_BINARY, ids=[c[0] for c in COMPOSITE_BINARY])
def test_composite_binary_matches_its_formula(name, fn, ref):
  rng = random.Random(name)
  a, b = _vals(rng, 15), [v if abs(v) > 0.2 else 0.7 for v in _vals(rng, 15)]
  check_op(fn, lambda x, y: x.map(ref, y), (a, (3, 5)), (b, (3, 5)), rtol=2e-4)

def test_a_realized_pow_is_read_by_a_graph_built_on_it_before():  # (its plan reads it from memory)
  y = Tensor([1.0, 2.0, 3.0]) ** 2.5
  z = y * 2
  y.realize()
  assert z.tolist() == pytest.approx([2 * v ** 2.5 for v in (1, 2, 3)], rel=1e-6)

def test_pow_keeps_tinygrads_sign_and_int_rules():
  x = Tensor([-2.0, -2.0, 0.0, 0.0, 3.0, -8.0])
  got = x.pow(Tensor([3.0, 0.5, 0.0, -1.0, 2.0, 2.0])).tolist()
  assert got[0] == -8.0 and math.isnan(got[1]) and got[2] == 1.0 and got[3] == math.inf and got[4:] == [9.0, 64.0]
  assert (Tensor([2, -3]) ** 3).tolist() == [8, -27] and (Tensor([2, -3]) ** 3).dtype == dtypes.int
  with pytest.raises(TypeError, match="int"): Tensor([2, 3]) ** -1
  assert (Tensor([2, 3, -1]) ** 100).tolist() == [(v ** 100 + 2**31) % 2**32 - 2**31 for v in (2, 3, -1)]  # wraps

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_an_int_to_an_int_tensors_power_is_exact_and_wraps(device):  # as torch's (its float form gave 10**2 = 99.99)
  rng = random.Random(7)
  bases, powers = [rng.randint(-12, 12) for _ in range(67)], [rng.randint(-3, 70) for _ in range(67)]
  def want(b, e):  # int32's: wrapped; a negative power, 1 / b**-e toward 0
    if e < 0: return 1 if b == 1 else (-1) ** e if b == -1 else 0
    return (b ** e + 2**31) % 2**32 - 2**31
  got = Tensor(bases, device=device) ** Tensor(powers, device=device)
  assert got.dtype == dtypes.int32 and got.tolist() == [want(b, e) for b, e in zip(bases, powers)]
  assert (10 ** Tensor([1, 2, 3], device=device)).tolist() == [10, 100, 1000]
  small = Tensor([0, 3, 200, 255], dtype=dtypes.uint8, device=device) ** Tensor([1, 2, 3, 0], dtype=dtypes.uint8,
                                                                                 device=device)
  assert small.dtype == dtypes.uint8 and small.tolist() == [0, 9, 200 ** 3 % 256, 1]  # (it came back int32)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_ints_past_their_range_and_16_bit_floats_in_pow_division_and_float_composites(device):
  """An int's power past 64 wraps as its dtype (int8: 2**200 overflowed a Python int into int8; uint64's raised);
  lerp, isclose, logaddexp and logsumexp of ints compute in float (a - b wrapped in the int); a 16-bit float's power
  and quotient are float32's rounded once (bfloat16's 3**20 was 3% off; float16's x / 1e-5 was inf)."""
  def wrapped(v, bits): return (v + 2**(bits - 1)) % 2**bits - 2**(bits - 1)
  int8 = Tensor([2, 3, -3], dtype=dtypes.int8, device=device)
  assert (int8 ** 201).tolist() == [wrapped(b ** 201, 8) for b in (2, 3, -3)]
  u64 = Tensor([2, 3, 5], dtype=dtypes.uint64, device=device)
  assert (u64 ** Tensor([7, 5, 2], dtype=dtypes.uint64, device=device)).tolist() == [128, 243, 25]
  assert (u64 ** 100).tolist() == [pow(b, 100, 2**64) for b in (2, 3, 5)]
  u8 = Tensor([200, 10, 0], dtype=dtypes.uint8, device=device)
  assert u8.lerp(Tensor([10, 200, 255], dtype=dtypes.uint8, device=device), 0.25).tolist() == [152.5, 57.5, 63.75]
  assert u8.logaddexp(Tensor([10, 200, 255], dtype=dtypes.uint8, device=device)).tolist() == [200.0, 200.0, 255.0]
  assert math.isclose(Tensor([1, 2, 3], dtype=dtypes.uint8, device=device).logsumexp().item(),
                      math.log(sum(math.exp(v) for v in (1, 2, 3))), rel_tol=1e-6)
  assert Tensor([-30000, 30000], dtype=dtypes.int16, device=device).logsumexp().item() == 30000.0
  assert Tensor([-2**31, 0], device=device).isclose(Tensor([2**31 - 1, -2**31], device=device)).tolist() == [False] * 2
  assert (Tensor([3.0], dtype=dtypes.half, device=device) ** 9).tolist() == [19680.0]  # (not 19696: rounded each step)
  bools = Tensor([True, False], device=device)  # (bool ** 2 was bool, ** 100 float: an int's power is an int)
  assert [(bools ** e).dtype for e in (2, 100, 2.5, True)] == [dtypes.int32] * 2 + [dtypes.float32, dtypes.bool]
  assert (bools ** 100).tolist() == [1, 0]
  halves = Tensor([0.0, 1e-5, 0.5, 2.5, 65504.0], dtype=dtypes.half, device=device)  # (1e-5: 1/x is inf in float16)
  assert (halves / Tensor([1e-5, 1e-5, 1e-5, 3.0, 65504.0], dtype=dtypes.half, device=device)).tolist() == \
    [0.0, 1.0, 49920.0, 0.83349609375, 1.0]  # (torch's)
  assert (Tensor([3.0], dtype=dtypes.bfloat16, device=device) ** 20).tolist() == [3489660928.0]  # (torch's)

def test_tinygrad_forms_bytes_empty_data_uint64_indices_half_attention_and_unicode_ellipsis():
  import struct
  assert Tensor(struct.pack("<ff", 0.25, 1.5), dtype=dtypes.float32).tolist() == [0.25, 1.5]  # (its memory)
  assert Tensor(bytes([1, 2, 3, 4]), dtype=dtypes.int16).tolist() == [513, 1027]
  with pytest.raises(ValueError, match="bytes"): Tensor(bytes(3), dtype=dtypes.int16)
  assert Tensor.ones(2, 0).data().tolist() == [] and Tensor([], dtype=dtypes.int32).data().shape == (0,)
  x, i = Tensor([[1.0, 0.0], [0.0, 2.0]]), Tensor([1, 0, 1], dtype=dtypes.uint64)
  assert x[i].tolist() == [[0.0, 2.0], [1.0, 0.0], [0.0, 2.0]] and i.one_hot(3).tolist()[0] == [0, 1, 0]
  q = Tensor(rand_list((1, 3, 4), 5), dtype=dtypes.half)
  assert q.scaled_dot_product_attention(q, q, is_causal=True).dtype == dtypes.half
  assert Tensor.ones(2, 3, 4, 5).rearrange("a b … -> (a b) …").shape == (6, 4, 5)
  for formula, sizes in [("a (b c -> a b c", {}), ("a (b (c)) -> a b c", {}), ("2b -> 2b", {}), ("_ -> _", {}),
                         ("(a b) -> a b", {"a": 2, "e": 2})]:  # (unpaired, nested, not words, a size not used)
    with pytest.raises(tiny.ShapeError, match="rearrange"): Tensor.ones(4).rearrange(formula, **sizes)

def test_composites_at_their_edges_as_torch_and_tinygrad():
  big = [7.0, 1e8, 1e10, 1e30]  # (relu(x) - relu(x - 6) cancelled: 1e8 gave 8, 1e10 gave 0)
  assert Tensor(big).relu6().tolist() == [6.0] * 4 and Tensor(big).hardsigmoid().tolist() == [1.0] * 4
  x = Tensor([2.0, -3.0, math.inf], requires_grad=True)
  (x ** 0).sum().backward()  # (1, with pow's slope: no gradient at all came back)
  assert (x ** 0).tolist() == [1.0] * 3 and x.grad.tolist() == [0.0] * 3
  x = Tensor([5e3, 1e5], requires_grad=True)
  x.acosh().sum().backward()  # (nan: the unused side of a where, log(0))
  assert_close(x.grad.tolist(), [1 / math.sqrt(v * v - 1) for v in (5e3, 1e5)], rtol=1e-5)
  x = Tensor([50.0, 200.0], requires_grad=True)
  x.sinh().sum().backward()  # (nan where the slope overflows: 0.5 / e^2's, 0 * inf)
  assert math.isclose(x.grad.tolist()[0], math.cosh(50.0), rel_tol=1e-5) and x.grad.tolist()[1] == math.inf
  logits = Tensor([[0.0, -math.inf, 1.0, 2.0]], requires_grad=True)  # a class masked out: 0 * -inf gave nan
  want = math.log(1 + math.e + math.e ** 2)
  assert math.isclose(logits.cross_entropy(Tensor([0])).item(), want, rel_tol=1e-6)
  assert math.isclose(logits.sparse_categorical_crossentropy(Tensor([0])).item(), want, rel_tol=1e-6)
  logits.cross_entropy(Tensor([0])).backward()
  assert logits.grad.tolist()[0][1] == 0.0
  with pytest.raises(ValueError, match="float"): Tensor.rand(3, dtype=dtypes.int32)
  with pytest.raises(ValueError, match="smaller"): Tensor.ones(3, 4).pad_to(2, 5)
  assert Tensor.ones(3, 1).expand(None, 4).shape == (3, 4) and Tensor.ones(3).expand(4, None).shape == (4, 3)
  assert Tensor.ones(2, 3, 5).T.shape == (3, 2, 5) and Tensor.ones(3).T.shape == (3,)  # (tinygrad's: dims 0 and 1)

def test_small_dtypes_keep_their_dtype_through_composites():  # each came back wider (the -1 or the 1 of a constant)
  assert Tensor([0, 5, 200], dtype=dtypes.uint8).sign().dtype == dtypes.uint8
  assert Tensor([0, 5, 200], dtype=dtypes.uint8).sign().tolist() == [0, 1, 1]
  x = Tensor([[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]], dtype=dtypes.half)
  assert x.avg_pool2d((2, 2), stride=1).dtype == dtypes.half and x.avg_pool2d((2, 2), stride=1).tolist() == [[[[3, 4]]]]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_16_bit_floats_product_is_taken_in_float32_and_rounded_once(device):  # as its sum (it rounded each factor)
  rng = random.Random(5)
  vals = [rng.uniform(0.8, 1.3) * rng.choice((-1, 1)) for _ in range(67)]
  for dtype, rounded in ((dtypes.half, f16), (dtypes.bfloat16, bf16)):
    x = Tensor(vals, dtype=dtype, device=device)
    want = 1.0
    for v in x.float().tolist(): want = float(struct.unpack("f", struct.pack("f", want * v))[0])  # float32 products
    assert x.prod().dtype == dtype and x.prod().float().item() == rounded(want)

def test_rand_of_a_16_bit_float_stays_below_1():  # a float32 fraction rounded to half reached 1.0 (22 in 100,000)
  Tensor.manual_seed(1)
  for dtype in (dtypes.half, dtypes.bfloat16):
    v = Tensor.rand(100000, dtype=dtype).float().tolist()
    assert max(v) < 1.0 and min(v) >= 0.0 and len(set(v)) > 200

def test_tinygrads_call_forms():
  """Calls written for tinygrad 0.14 that tiny refused or answered otherwise: x.stack(y) (a staticmethod took x for
  nothing), pad's mode before its value, allclose as a tensor, full's fill_value, flip's axes as arguments, randperm's
  device second, an int arange of float steps (it came back float), assign of a number or a list, a float index's
  IndexError, sign of a bool."""
  a, b = Tensor([1, 2]), Tensor([3, 4])
  assert a.stack(b).tolist() == [[1, 2], [3, 4]] and a.stack(b, dim=1).tolist() == [[1, 3], [2, 4]]
  assert Tensor([1.0, 2.0, 3.0]).pad((1, 1), "reflect").tolist() == [2.0, 1.0, 2.0, 3.0, 2.0]
  assert Tensor([1.0, 2.0, 3.0]).pad((1, 1), "constant", 5.0).tolist() == [5.0, 1.0, 2.0, 3.0, 5.0]
  assert Tensor([1.0]).allclose(Tensor([1.0])).item() is True and not Tensor([1.0]).allclose(Tensor([2.0]))
  assert Tensor.full((2,), fill_value=3).tolist() == [3, 3] and a.full_like(fill_value=7).tolist() == [7, 7]
  assert Tensor([[1, 2], [3, 4]]).flip(0, 1).tolist() == [[4, 3], [2, 1]]
  assert sorted(Tensor.randperm(5, "CPU").tolist()) == [0, 1, 2, 3, 4]
  steps = Tensor.arange(0, 2.5, 0.5, dtype=dtypes.int32)
  assert steps.dtype == dtypes.int32 and steps.tolist() == [0, 0, 1, 1, 2]  # each value truncated
  x = Tensor([1.0, 2.0])
  x.assign(0)
  assert x.tolist() == [0.0, 0.0]
  x.assign([3, 4])
  assert x.tolist() == [3.0, 4.0]
  x.assign(memoryview(array.array("f", [5.0, 6.0])))  # (what Tensor() takes: numpy's arrays too)
  assert x.tolist() == [5.0, 6.0]
  with pytest.raises(IndexError): x[1.0]
  assert Tensor([True, False]).sign().tolist() == [True, False]
  assert dtypes.ints == dtypes.uints + dtypes.sints and dtypes.half in dtypes.floats and dtypes.is_bool(dtypes.bool)
  assert (dtypes.from_py(1.5), dtypes.from_py(True), dtypes.from_py(3)) == (dtypes.float, dtypes.bool, dtypes.int)
  logits, labels = Tensor([[0.5, -1.0, 2.0], [1.0, 0.25, -0.5]], dtype=dtypes.half), Tensor([2, 0])
  assert logits.cross_entropy(labels).dtype == logits.log_softmax().nll_loss(labels).dtype == dtypes.half
  assert (Tensor([2, 3]) ** Tensor([0.5, 2.0], dtype=dtypes.half)).dtype == dtypes.half  # as int + half is

def test_tinygrads_keywords_and_numpys_scalars():
  """tinygrad 0.14's dtype= (softmax's, matmul's, linear's, conv2d's), reverse= of the named binary ops, clone's
  device, full's buffer= and rand's contiguous=; numpy's ints as sizes, dims and indices, and numpy's
  scalars as operands (a numpy int in a graph, and later graphs of Python ints equal to it, reach their kernel's cache
  file); negative repeats and an einsum output letter no operand has raise (rather than give the input, or the whole
  sum)."""
  x = Tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
  assert x.softmax(-1, dtype=dtypes.half).dtype == x.log_softmax(dtype=dtypes.half).dtype == dtypes.half
  assert x.half().matmul(x.half().T, dtype=dtypes.float).dtype == dtypes.float
  assert x.matmul(Tensor([[1.0, 2.0], [0.0, 1.0]]), reverse=True).tolist() == [[6.0, 9.0, 12.0], [3.0, 4.0, 5.0]]
  assert x.linear(x.T, dtype=dtypes.half).tolist() == [[5.0, 14.0], [14.0, 50.0]]
  assert x.reshape(1, 1, 2, 3).conv2d(Tensor.ones(1, 1, 1, 1), dtype=dtypes.half).dtype == dtypes.half
  assert x[0].sub(1, reverse=True).tolist() == [1.0, 0.0, -1.0] and x[1].div(60, True).tolist() == [20.0, 15.0, 12.0]
  assert Tensor([1, 2]).lshift(3, reverse=True).tolist() == [6, 12] and x[0].pow(2, reverse=True).tolist()[2] == 4.0
  assert x.clone(device="PYTHON").device == "PYTHON" and x.clone("CPU").tolist() == x.tolist()
  assert Tensor.full((2,), 3, buffer=False).tolist() == [3, 3] and Tensor.rand(3, contiguous=False).shape == (3,)
  np = pytest.importorskip("numpy")
  i3, i2 = np.int64(3), np.int32(2)
  t = Tensor.arange(24).reshape(4, 6)
  lazy = [t.split([i3, np.int64(1)])[0], t.pad(((i2, 1), (0, i3))), t.roll(i2, 1), t[:1].expand(i3, 6), t[i3],
          Tensor.full((i3, i2), 2), t.permute(np.int64(1), 0), t.repeat(i2, 1), t.cat(t, dim=np.int64(1)),
          t.chunk(i2)[0], t * np.float32(2), t * i3, t.reshape(i3, 8), Tensor.eye(i3)]
  for got in lazy: got.realize()
  assert t[i3].tolist() == list(range(18, 24)) and (t * np.float32(0.5)).tolist()[0][:2] == [0.0, 0.5]
  assert t.repeat(i2, 1).shape == (8, 6) and t.split([i3, np.int64(1)])[1].tolist() == [list(range(18, 24))]
  assert t[3:].tolist() == [list(range(18, 24))] and t.reshape(3, 8).tolist()[2][7] == 23  # (Python's ints again)
  with pytest.raises(ValueError, match="repeats"): x.repeat_interleave(-1)
  with pytest.raises(RuntimeError, match="k"): Tensor.einsum("ij->k", x)

def test_what_tinygrads_own_tests_ask_of_a_tensor():
  """From tinygrad's unit tests: Context(TRAINING=True) (a bool) is 1; a pickled or deep-copied dtype is the one
  object and a tensor pickles as its values; TinyJit on a method; tinygrad's error types (two devices, index tensors
  that don't broadcast, del t[i]); pad_to of too many dims and uniform(low >= high) raise; a bfloat16's numpy() is
  float32; "CPU:0" is the CPU; Tensor(None) is a 0; a list of slices or tensors indexes as a tuple."""
  import copy, pickle
  with tiny.Context(TRAINING=True, DEBUG=False): assert tiny.getenv("TRAINING") == 1 and tiny.getenv("DEBUG") == 0
  assert pickle.loads(pickle.dumps(dtypes.float)) is dtypes.float
  assert copy.deepcopy(dtypes.half.vec(4)) is dtypes.half.vec(4)
  t = Tensor([[1.5, -2.0], [3.0, 4.0]], requires_grad=True)
  for again in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t)):
    assert again.tolist() == t.tolist() and again.requires_grad and (again + 1).tolist() == [[2.5, -1.0], [4.0, 5.0]]
  assert pickle.loads(pickle.dumps(Tensor.zeros(0, 3, dtype=dtypes.int8))).shape == (0, 3)
  class Model:
    def __init__(self): self.w = Tensor([1.0, 2.0]).contiguous().realize()
    @tiny.TinyJit
    def __call__(self, x): return (x * self.w).realize()
  m = Model()
  assert [m(Tensor([float(i), 1.0])).tolist() for i in range(4)] == [[float(i), 2.0] for i in range(4)]
  with pytest.raises(RuntimeError, match="CPU and PYTHON"): Tensor([1.0]) + Tensor([1.0], device="PYTHON")
  with pytest.raises(IndexError): Tensor([[1, 2], [3, 4]])[Tensor([0, 1]), Tensor([0, 1, 0])]
  with pytest.raises(TypeError): del t[0]
  with pytest.raises(ValueError): Tensor([1, 2]).pad_to(2, 3)
  with pytest.raises(ValueError): Tensor.uniform(4, low=5.0, high=3.0)
  assert Tensor([1.5, 2.0], dtype=dtypes.bfloat16).numpy().tolist() == [1.5, 2.0]
  assert Tensor([1.0], device="CPU:0").device == "CPU" and Tensor(None).shape == () and Tensor(None).item() == 0.0
  r = Tensor([[1, 2], [3, 4], [5, 6]])
  assert r[[slice(None), [1, 0]]].tolist() == [[2, 1], [4, 3], [6, 5]]
  assert r[[Tensor([0, 0]), Tensor([0, 1])]].tolist() == [1, 2]

def test_rounding_has_a_zero_gradient_and_autograd_errors_are_runtime_errors():
  """round, floor, ceil and trunc: exactly 0 (an infinite gradient through them made nan, through x * 0; past 2**23,
  1); an int loss or target, or an int tensor requiring grad, raise a RuntimeError, as torch's and tinygrad's."""
  for f in ("round", "floor", "ceil", "trunc"):
    x = Tensor([0.3, -0.7, 2.5, 1e10, -0.2], requires_grad=True)
    assert (getattr(x, f)() * math.inf).sum().gradient(x)[0].tolist() == [0.0] * 5
  with pytest.raises(RuntimeError): Tensor([1, 2]).sum().backward()
  with pytest.raises(RuntimeError): (Tensor([1.0]) * 2).sum().gradient(Tensor([1, 2]))
  with pytest.raises(RuntimeError): Tensor([1, 2], requires_grad=True)

def test_an_index_picks_small_ints_with_one_load():
  """x[idx] and gather of a small int (summed in a wider int, under a cast) pick by a load, as of a float: it was a
  pass over every row for each pick (an MNIST batch of uint8 images: 20 s)."""
  rows = [[(r * 7 + c) % 101 for c in range(5)] for r in range(37)]
  for dtype in (dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.bool):
    x = Tensor(rows, dtype=dtype)
    idx = [3, -1, 36, 0, 17, -37]
    got = x[Tensor(idx)]
    want = Tensor(rows, dtype=dtype)[idx[0]].tolist()
    assert got.tolist()[0] == want and got.tolist() == [x[i].tolist() for i in idx]
    assert all("< 37;" not in prog.src for prog in tiny.render(x[Tensor(idx)]))  # no loop over the rows
  for dtype in (dtypes.int64, dtypes.uint32, dtypes.int16):  # (the index's: an arange under casts that hold it)
    assert all("< 37;" not in prog.src for prog in tiny.render(x[Tensor([3, 36], dtype)]))

def test_tinygrads_training_setting_and_nn_keywords(tmp_path):
  """tinygrad 0.14 trains under Context(TRAINING=1) (or TRAINING=1 in the environment): dropout and BatchNorm train
  there too (not as in eval). nn.Conv2d takes padding="same"; load_state_dict takes consume= and realize= and
  returns what it loaded."""
  Tensor.manual_seed(0)
  with tiny.Context(TRAINING=1):
    dropped = Tensor.ones(1000).dropout(0.5).tolist()
    bn = tiny.nn.BatchNorm(2)
    bn(Tensor([[1.0, 2.0], [3.0, 6.0]])).realize()
  assert 300 < dropped.count(0.0) < 700 and bn.running_mean.tolist() == pytest.approx([0.2, 0.4])
  assert Tensor.ones(10).dropout(0.5).tolist() == [1.0] * 10  # not training outside it
  conv = tiny.nn.Conv2d(1, 1, (3, 4), padding="same", bias=False)
  x = Tensor([[[[float(i * 6 + j) for j in range(6)] for i in range(5)]]])
  # the same as padding by hand: rows 1 and 1, columns 1 before and 2 after (torch's split of an even kernel's 3)
  assert conv(x).tolist() == x.pad((1, 2, 1, 1)).conv2d(conv.weight).tolist() and conv(x).shape == (1, 1, 5, 6)
  with pytest.raises(ValueError, match="same"): tiny.nn.Conv2d(1, 1, 3, padding="valid")
  src, dst = tiny.nn.Linear(3, 2), tiny.nn.Linear(3, 2)
  state = tiny.nn.state.get_state_dict(src)
  loaded = tiny.nn.state.load_state_dict(dst, state, verbose=False, consume=True)
  assert len(loaded) == 2 and state == {} and dst.weight.tolist() == src.weight.tolist()

def test_a_minus_one_in_a_shape_beside_a_size_0():
  """-1 is what the other sizes leave: beside a 0 that is any size, so it raises (as torch's); the composites that
  asked for one gave a wrong shape (cumsum over 17 of (0, 17): (0, 0)) or raised."""
  empty = Tensor.zeros(0, 17)
  assert empty.cumsum(1).shape == empty.cumprod(1).shape == empty.cummax(1)[0].shape == (0, 17)
  assert empty.logcumsumexp(1).shape == (0, 17) and empty.reshape(-1, 17).shape == (0, 17)
  assert Tensor.zeros(3, 0, 20).unflatten(0, (1, -1)).shape == (1, 3, 0, 20)
  assert Tensor.zeros(2, 0, 4, 4).conv2d(Tensor.zeros(3, 0, 3, 3)).shape == (2, 3, 2, 2)
  with pytest.raises(ValueError, match="-1"): empty.reshape(0, -1)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_pow_has_its_own_gradient_at_zero_negative_and_infinite_bases(device):
  """d/db b^e = e b^(e-1) (0 where e is 0) and d/de b^e = b^e ln b (0 where b is 0 and e >= 0), as torch's: not what
  the exp2 and log2 that compute the value would give (nan at 0, 0 where the value is nan)."""
  def c_pow(b, e):  # C's pow, which the forward pass follows: Python's, where that raises for a zero or negative base
    try: return math.pow(b, e)
    except ValueError: return math.nan if b < 0 else math.copysign(math.inf, b) if e % 2 == 1 else math.inf
  def log(v): return -math.inf if v == 0 else math.nan if v < 0 else math.log(v)
  pairs = [(b, e) for b in (-math.inf, -2.0, 0.0, 0.5, 2.0, math.inf) for e in (-1.0, 0.0, 0.3, 1.0, 2.5, 3.0)]
  bs, es = [b for b, _ in pairs], [e for _, e in pairs]
  b, e = Tensor(bs, device=device, requires_grad=True), Tensor(es, device=device, requires_grad=True)
  y = b ** e
  gb, ge = y.sum().gradient(b, e)
  want_y = [c_pow(x, p) for x, p in pairs]
  want_gb = [0.0 if p == 0 else p * c_pow(x, p - 1) for x, p in pairs]
  want_ge = [0.0 if x == 0 and p >= 0 else c_pow(x, p) * log(x) for x, p in pairs]
  for got, want in ((y, want_y), (gb, want_gb), (ge, want_ge)):
    for (x, p), g, w in zip(pairs, got.tolist(), want):
      assert math.isnan(g) == math.isnan(w) and (math.isnan(w) or math.isclose(g, w, rel_tol=1e-5)), (x, p, g, w)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_pow_is_one_where_c_says_so_though_its_log_is_nan(device):  # C's pow: 1^y, x^0 and (-1)^inf are 1
  pairs = [(1.0, NAN), (1.0, INF), (1.0, -INF), (-1.0, INF), (-1.0, -INF), (NAN, 0.0), (-1.0, 3.0), (-1.0, 0.5)]
  got = Tensor([b for b, _ in pairs], device=device).pow(Tensor([e for _, e in pairs], device=device)).tolist()
  assert got[:-1] == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0] and math.isnan(got[-1])

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_nan_is_the_max_that_index_ops_point_at(device):
  """A row's max is nan where it holds one, as torch's: argmax, argmin, cummax, max_pool2d's indices, sort and the
  max's gradient take a nan as above every number (sort puts it last, as torch's), never an index past the row."""
  x = [[1.0, NAN, 2.0, NAN, 5.0], [3.0, 1.0, 4.0, 1.0, 5.0], [NAN, 0.5, -1.0, 2.0, 0.5]]
  def key(v): return (1, 0.0) if math.isnan(v) else (0, v)
  def first(row, best): return next(i for i, v in enumerate(row) if key(v) == best(map(key, row)))
  t = Tensor(x, device=device)
  assert t.argmax(1).tolist() == [first(row, max) for row in x]
  assert t.argmin(1).tolist() == [first(row, max) if any(map(math.isnan, row)) else first(row, min) for row in x]
  assert t.cummax(1)[1].tolist() == [[max(j for j in range(i + 1) if key(row[j]) == max(map(key, row[:i + 1])))
                                       for i in range(5)] for row in x]
  for descending in (False, True):
    order = [sorted(range(5), key=lambda i: key(row[i]), reverse=descending) for row in x]
    values, where = t.sort(1, descending=descending)
    assert where.tolist() == order
    assert [list(map(key, row)) for row in values.tolist()] == [[key(row[i]) for i in o] for row, o in zip(x, order)]
  where = t.reshape(1, 1, 3, 5).max_pool2d(2, stride=1, return_indices=True)[1].flatten().tolist()
  windows = [[(r + a) * 5 + c + b for a in (0, 1) for b in (0, 1)] for r in range(2) for c in range(4)]
  assert where == [max(w, key=lambda i: (key(sum(x, [])[i]), -i)) for w in windows]  # one nan in a window at most
  g = Tensor(x, device=device, requires_grad=True)
  g.max().backward()
  assert g.grad.tolist() == [[f32(1 / 3) if math.isnan(v) else 0.0 for v in row] for row in x]  # split among nans

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_float64_rounding_keeps_fractions_past_float32s_bits(device):
  vals = [1e7 + 0.5, -1e7 - 0.5, 2.0 ** 40 + 0.25, -(2.0 ** 51) - 0.5, 2.0 ** 52 - 0.5, 2.0 ** 60, -2.5, 3.5]
  t = Tensor(vals, dtype=dtypes.float64, device=device)
  assert t.trunc().tolist() == [float(math.trunc(v)) for v in vals]
  assert t.floor().tolist() == [float(math.floor(v)) for v in vals]
  assert t.ceil().tolist() == [float(math.ceil(v)) for v in vals]
  assert t.round().tolist() == [float(round(v)) for v in vals]  # half to even
  assert (t % 1).tolist() == [v % 1 for v in vals] and (t // 1).tolist() == [v // 1 for v in vals]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_cat_stack_and_pad_keep_the_sign_of_zero(device):
  def signs(vals): return [math.copysign(1, v) for v in vals]
  vals = [-0.0, 0.0, -1.0]
  a = Tensor(vals, device=device)
  assert signs(a.cat(a, a).tolist()) == signs(vals * 3)
  assert signs(Tensor.stack(a, a, dim=1).flatten().tolist()) == signs([v for v in vals for _ in range(2)])
  assert signs(a.pad((1, 2), value=-0.0).tolist()) == signs([-0.0, *vals, -0.0, -0.0])

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_composites_at_their_edges_match_torch(device):
  """nonzero over size-1 dims, logcumsumexp past infinities, an int scatter mean (rounded down), lerp from the nearer
  end (exact at 0 and 1), and a rounding to zero that keeps the sign of what it rounds, as C's and torch's."""
  mask = [[True], [False], [True]]
  assert Tensor(mask, device=device).nonzero().tolist() == [[0, 0], [2, 0]]
  assert Tensor([[1.0], [2.0], [3.0]], device=device)[Tensor(mask, device=device)].tolist() == [1.0, 3.0]
  for row in ([-INF, 0.0, 1.0], [0.0, INF, 1.0], [-INF, -INF, 2.0]):
    want = [math.log(math.fsum(math.exp(v) for v in row[:i + 1])) if any(v > -INF for v in row[:i + 1]) else -INF
            if INF not in row[:i + 1] else INF for i in range(3)]
    assert Tensor(row, device=device).logcumsumexp(0).tolist() == pytest.approx(want)
  got = Tensor([0, 0, 5], dtype=dtypes.int32, device=device).scatter_reduce(
    0, Tensor([0, 0, 1, 1], device=device), Tensor([1, 2, -3, 0], dtype=dtypes.int32, device=device), "mean")
  assert got.dtype == dtypes.int32 and got.tolist() == [(0 + 1 + 2) // 3, (0 - 3 + 0) // 3, 5]
  a, b = Tensor([1e8, 1.0, INF], device=device), Tensor([0.1, 3.0, 1.0], device=device)
  assert a.lerp(b, 1.0).tolist()[:2] == [f32(0.1), 3.0] and a.lerp(b, 0.0).tolist()[:2] == [1e8, 1.0]
  assert a.lerp(b, Tensor([1.0, 0.25, 0.5], device=device)).tolist() == [f32(0.1), 1.5, INF]
  vals = [-0.5, -0.3, -0.0, 0.0, -1.5, 2.5, -2.7, 0.2]
  def c_round(v): return math.copysign(float(round(v)), v)  # half to even, a zero with v's sign
  for name, ref in (("trunc", math.trunc), ("floor", math.floor), ("ceil", math.ceil), ("round", c_round)):
    got = getattr(Tensor(vals, device=device), name)().tolist()
    want = [math.copysign(float(ref(v)), v) if ref(v) == 0 else float(ref(v)) for v in vals]
    assert [(g, math.copysign(1, g)) for g in got] == [(w, math.copysign(1, w)) for w in want], name

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_double_transcendentals_keep_doubles_precision(device):  # (only 16-bit floats' run in float32)
  vals = [2.0, 3.0, 0.5, 1e-300, 700.0, -1.25]
  for name, ref in (("sqrt", math.sqrt), ("exp", math.exp), ("log", math.log), ("sin", math.sin), ("cos", math.cos),
                    ("exp2", lambda v: 2.0 ** v), ("log2", math.log2)):
    got = getattr(Tensor(vals, dtype=dtypes.float64, device=device), name)().tolist()
    for v, g in zip(vals, got):
      try: want = ref(v)
      except ValueError: want = NAN  # (the log and sqrt of a negative number)
      assert math.isnan(g) if math.isnan(want) else math.isclose(g, want, rel_tol=1e-13), (name, v, g, want)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_float_remainders_are_exact_where_a_quotient_rounds_to_a_whole_number(device):
  """3.0 / 0.1 rounds to 30 in float32, but 0.1 (a bit over a tenth) goes into 3.0 only 29 times: the remainder is C's
  exact fmod, moved to the divisor's sign, and the floor quotient what is left over b, as Python's and torch's (the
  quotient's rounding gave -4e-8 of the wrong sign, and 30)."""
  rng = random.Random(7)
  bs = [f32(rng.choice([0.1, 0.3, 0.7, 1.1, -0.1, -0.3]) * rng.uniform(0.5, 2)) for _ in range(40)] + [f32(0.1)] * 3
  xs = [f32(b * rng.randint(-50, 50) + rng.choice([0.0, 0.0, 1e-6, -1e-6])) for b in bs[:40]] + [3.0, f32(1000.3), -3.0]
  a, b = Tensor(xs, device=device), Tensor(bs, device=device)
  assert a.fmod(b).tolist() == [f32(math.fmod(x, y)) for x, y in zip(xs, bs)]
  assert (a % b).tolist() == [f32(x % y) for x, y in zip(xs, bs)]
  assert (a // b).tolist() == a.div(b, rounding_mode="floor").tolist() == [f32(x // y) for x, y in zip(xs, bs)]
  assert (Tensor([1.0, -1.0], device=device) // 0.0).tolist() == [INF, -INF]  # x / 0, as torch's
  assert all(map(math.isnan, (Tensor([1.0, 0.0], device=device) % 0.0).tolist()))

def test_activations_have_their_slope_at_zero():  # as calculus (and torch) says: not 0, nor nan, from |x|'s tie at 0
  slopes = {"sigmoid": 0.25, "tanh": 1.0, "softplus": 0.5, "erf": 2 / math.sqrt(math.pi), "asinh": 1.0, "elu": 1.0,
            "atan": 1.0, "logsigmoid": 0.5}
  for name, want in slopes.items():
    x = Tensor([0.0], requires_grad=True)
    getattr(x, name)().sum().backward()
    assert math.isclose(x.grad.item(), want, rel_tol=1e-4), (name, x.grad.item(), want)

def test_activations_keep_their_values_and_gradients_at_the_tails():
  """A where's unused side still multiplies its zero by that side's slope, so e^x overflowing there would make elu's
  and celu's gradient at 100 nan: it is 1. log(1 + e^-x) and 1 + tanh(z) written out cancel at the tails: softplus(-30),
  logaddexp(0, -30) and gelu's tanh form at -4.2 keep their precision. cosh's slope near 0 is sinh x, not a difference
  of exponentials that cancels to 5e-9."""
  def slope(f, at: float) -> float:
    x = Tensor([at], requires_grad=True)
    f(x).sum().backward()
    return x.grad.item()
  assert slope(Tensor.elu, 100.0) == 1.0 and slope(lambda x: x.celu(2.0), 100.0) == 1.0
  assert Tensor([-30.0]).softplus().item() == pytest.approx(math.log1p(math.exp(-30)), rel=1e-6)
  assert Tensor([0.0]).logaddexp(-30.0).item() == pytest.approx(math.log1p(math.exp(-30)), rel=1e-6)
  x = -4.2224626541137695  # (a float32)
  z = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
  assert Tensor([x]).gelu().item() == pytest.approx(x / (1 + math.exp(-2 * z)), rel=1e-6)
  assert slope(Tensor.cosh, 1e-20) == pytest.approx(1e-20, rel=1e-6)
  assert slope(Tensor.acosh, 1.0) == math.inf  # (as torch's: not 0 * inf, nan)

def test_sign_pow_and_sinh_at_their_edges_match_torch():
  assert Tensor([INF, -INF, 0.0, 3.0, -2.0]).sign().tolist() == [1.0, -1.0, 0.0, 1.0, -1.0]  # (inf * 0 would be nan)
  assert math.isnan(Tensor([math.nan]).sign().item())
  assert (Tensor([5.0, 3.0, -7.0]) ** 2.0).tolist() == [25.0, 9.0, 49.0]  # a whole float power: exact, multiplied
  assert (Tensor([-0.0]) ** -1.0).item() == -INF and math.copysign(1, (Tensor([-0.0]) ** 3.0).item()) == -1
  for v in (89.0, -89.0, 20.0):  # (e^89 overflows a float32; sinh(89) doesn't)
    assert Tensor([v]).sinh().item() == pytest.approx(math.sinh(v), rel=2e-6)

def test_a_double_max_is_nan_where_either_operand_is():  # (as a float32's, and the emulator's)
  x = Tensor([1.0, 2.0], dtype=dtypes.float64)
  assert all(map(math.isnan, x.maximum(math.nan).tolist() + x.minimum(math.nan).tolist()))
  assert math.isnan(Tensor([1.0, math.nan], dtype=dtypes.float64).max().item())

def test_a_remainder_by_zero_then_by_a_constant_stays_zero():  # (x%0 is 0: (x%0)%4 doesn't fold to x%4)
  assert Tensor.arange(6).fmod(0).fmod(4).tolist() == [0] * 6
  assert Tensor.arange(6, device="PYTHON").fmod(0).fmod(4).tolist() == [0] * 6

def test_acosh_is_nan_everywhere_below_one():  # (past -4096, x + sqrt(x^2 - 1) cancels to 0, whose log is -inf)
  assert all(map(math.isnan, Tensor([-1.0, -5.0, -5000.0, -1e5, -1e10, -1e17, -1e19, 0.0, 0.99]).acosh().tolist()))
  x = Tensor([-5.0, -3.0], requires_grad=True)  # its slope there is torch's: 1 / sqrt(x^2 - 1), as if in its domain
  x.acosh().sum().backward()
  assert x.grad.tolist() == pytest.approx([1 / math.sqrt(24), 1 / math.sqrt(8)], rel=1e-6)

def test_composites_at_their_edges_match_torch_too():
  assert Tensor([183.0, -7.5, 7.0]).div(Tensor([61.0, 2.0, 0.0]), rounding_mode="trunc").tolist() == [3.0, -3.0, INF]
  assert Tensor([INF, -INF, INF]).div(Tensor([2.5, 3.0, -1.0]), rounding_mode="trunc").tolist() == [INF, -INF, -INF]
  assert Tensor([-INF, INF, 1.0]).logaddexp(Tensor([-INF, INF, 1.0])).tolist()[:2] == [-INF, INF]
  assert Tensor([1e20]).asinh().item() == pytest.approx(math.asinh(1e20)) == Tensor([1e20]).acosh().item()
  assert all(map(math.isnan, Tensor([-1e20, -2.0, 0.5]).acosh().tolist()))  # (outside its domain; -1e20^2 overflows)
  assert Tensor([100.0] * 1000).half().mean().item() == 100.0  # (the sum, 1e5, is past half's 65504)
  assert Tensor([300.0] * 10 + [0.0]).half().var().item() == pytest.approx(8181.8, rel=1e-3)
  assert Tensor([2048.0, 1, 1, 1, 1]).half().cumsum().tolist() == [2048.0, 2048.0, 2050.0, 2052.0, 2052.0]
  assert Tensor([0.0, 1.0]).binary_crossentropy(Tensor([0.0, 1.0])).item() == 0.0  # (log clamped at -100, as torch's)
  assert Tensor([[3.0, -4.0]]).normalize(p=math.inf).tolist() == [[0.75, -1.0]]
  assert Tensor([[1, 5], [3, 2]]).argmax(keepdim=True).tolist() == [[1]]
  assert Tensor([True, False]).isclose(Tensor([True, True])).tolist() == [True, False]
  class Real(float): pass  # (a float of another type, as numpy's float64: -0.0 and 0.0 stay apart in the cache too)
  for zero in (0.0, Real(0.0), -0.0, Real(-0.0)):
    got = Tensor([True, False]).where(zero, 1.0).tolist()[0]
    assert math.copysign(1, got) == math.copysign(1, zero), zero
  with pytest.raises(RuntimeError, match="ints"): Tensor([1.0, 2.0]).gather(0, Tensor([0.0]))  # (torch's, tinygrad's)
  with pytest.raises(RuntimeError, match="approximate"): Tensor([1.0]).gelu(approximate="foo")

def test_float_checks_and_closeness():
  x = Tensor([1.0, math.nan, math.inf, -math.inf, -0.0])
  assert x.isnan().tolist() == [False, True, False, False, False]
  assert x.isinf().tolist() == [False, False, True, True, False] and x.isinf(detect_negative=False).tolist()[3] is False
  assert x.isfinite().tolist() == [True, False, False, False, True]
  assert x.isclose(Tensor([1.0 + 1e-7, math.nan, math.inf, math.inf, 0.0])).tolist() == [True, False, True, False, True]
  assert x.isclose(x, equal_nan=True).tolist() == [True] * 5 and not x.allclose(x) and x.allclose(x, equal_nan=True)
  assert Tensor([3.0, -3.0]).copysign(Tensor([-0.0, 0.0])).tolist() == [-3.0, 3.0]
  assert Tensor([7, -7]).fmod(3).tolist() == [1, -1] and Tensor([7.5, -7.5]).fmod(2).tolist() == [1.5, -1.5]

def _rows(x:Ref, axis:int):  # each row along axis (as lists), with the index it belongs at
  other = [i for i in range(len(x.shape)) if i != axis]
  for idx in itertools.product(*[range(x.shape[i]) for i in other]):
    def full(k): return tuple(idx[other.index(d)] if d != axis else k for d in range(len(x.shape)))
    yield full, [x.at(full(k)) for k in range(x.shape[axis])]

def _along(x:Ref, axis:int, f, size=None):  # a row function applied along axis: a row of size values per row
  out = {}
  for full, row in _rows(x, axis):
    for k, v in enumerate(f(row)): out[full(k)] = v
  shape = tuple(size if d == axis and size is not None else s for d, s in enumerate(x.shape))
  return x.made(shape, lambda idx: out[tuple(idx)])

def _var(row, c=1): m = sum(row) / len(row); return sum((v - m) ** 2 for v in row) / (len(row) - c)
def _lse(row): m = max(row); return m + math.log(sum(math.exp(v - m) for v in row))
REDUCE_COMPOSITES = [  # (name, tiny, reference of a row, its size)
  ("prod", lambda t: t.prod(1, keepdim=True), lambda r: [math.prod(r)], 1),
  ("var", lambda t: t.var(1, keepdim=True), lambda r: [_var(r)], 1),
  ("var0", lambda t: t.var(1, keepdim=True, correction=0), lambda r: [_var(r, 0)], 1),
  ("std", lambda t: t.std(1, keepdim=True), lambda r: [_var(r) ** 0.5], 1),
  ("logsumexp", lambda t: t.logsumexp(1, keepdim=True), lambda r: [_lse(r)], 1),
  ("softmin", lambda t: t.softmin(1), lambda r: [math.exp(-v - _lse([-u for u in r])) for v in r], None),
  ("normalize", lambda t: t.normalize(dim=1), lambda r: [v / math.sqrt(sum(u * u for u in r)) for v in r], None),
  ("cumsum", lambda t: t.cumsum(1), lambda r: list(itertools.accumulate(r)), None),
  ("cumprod", lambda t: t.cumprod(1), lambda r: list(itertools.accumulate(r, operator.mul)), None),
  ("cummax", lambda t: t.cummax(1)[0], lambda r: list(itertools.accumulate(r, max)), None),
  ("cummin", lambda t: t.cummin(1)[0], lambda r: list(itertools.accumulate(r, min)), None),
  ("logcumsumexp", lambda t: t.logcumsumexp(1), lambda r: [_lse(r[:k + 1]) for k in range(len(r))], None),
  ("sort", lambda t: t.sort(1)[0], sorted, None), ("sort down", lambda t: t.sort(1, descending=True)[0],
                                                   lambda r: sorted(r, reverse=True), None),
  ("topk", lambda t: t.topk(3, 1)[0], lambda r: sorted(r, reverse=True)[:3], 3)]

@pytest.mark.parametrize("name,fn,ref,size", REDUCE_COMPOSITES, ids=[c[0] for c in REDUCE_COMPOSITES])
def test_reduce_and_scan_composites_match_their_formulas(name, fn, ref, size):
  rng = random.Random(name)
  vals = _vals(rng, 3 * 7 * 2, 0.5 if name == "cumprod" else -2)
  check_op(fn, lambda x: _along(x, 1, ref, size), (vals, (3, 7, 2)), rtol=2e-4, atol=2e-5)

def test_a_scans_blocks_unroll_their_triangle_and_its_compares_fold_away():
  tiny.program_cache.clear()
  with pytest.MonkeyPatch.context() as m:
    m.setenv("NOCACHE", "1")  # (the uops of a program from the disk cache aren't kept)
    blocks = tiny.render(Tensor.empty(63 * 16).cumsum())[0]
  assert blocks.opts == "upcast 16:16 unroll 16:16" and not any(u.op in tiny.GroupOp.Compare for u in blocks.uops)
  # (no loop left: no vector accumulators, each summed across at the end; the sums share their partial sums)
  assert all(u.dtype.count == 1 for u in blocks.uops if u.op is tiny.Ops.ADD), blocks.src

def test_a_remainder_below_the_common_factor_of_a_sum_leaves_its_division():
  """(g*a + b) // c is a // (c/g) and (g*a + b) % c is (a % (c/g))*g + b, where g divides c and 0 <= b < g: b a
  constant, or a range (a flat index's lower dims); every value checked against Python's // and %."""
  r, s = (tiny.new_range(n, tiny.AxisType.GLOBAL) for n in (11, 9))
  const = lambda v: tiny.UOp.const(dtypes.index, v)
  cases = [(r * g + s * (2 * g) + k, c, lambda i, j, g=g, k=k: g * i + 2 * g * j + k, r)
           for g, k, c in ((8, 3, 16), (8, 7, 16), (6, 5, 18), (6, 5, 12), (4, 0, 12))]
  cases += [(r * 12 + s, 36, lambda i, j: 12 * i + j, s), (r * 16 + s + 3, 48, lambda i, j: 16 * i + j + 3, s)]
  for x, c, value, below in cases:
    for op in (operator.floordiv, operator.mod):
      folded = tiny.simplify(op(x, c))
      if op is operator.floordiv:  # the remainder is gone: no constant, and no range below g (s < 12 or s + 3 < 16)
        assert not any(u.op is tiny.Ops.ADD and u.src[1].op is tiny.Ops.CONST for u in folded.toposort), folded
        assert below is r or below not in folded.toposort, folded
      for i, j in itertools.product(range(11), range(9)):
        assert tiny.simplify(tiny.substitute(folded, {r: const(i), s: const(j)})).arg == op(value(i, j), c)

def test_scans_past_a_block_and_their_indices():
  rng = random.Random(5)
  vals = Tensor(_vals(rng, 2 * 600)).tolist()  # (float32 values: cummax's are exact)
  got = flat(Tensor(vals).reshape(2, 600).cumsum(1).tolist())
  assert_close(got, list(itertools.accumulate(vals[:600])) + list(itertools.accumulate(vals[600:])),
               rtol=1e-4, atol=1e-4)
  assert flat(Tensor(vals).reshape(2, 600).cummax(1)[0].tolist()) == [max(vals[r * 600:r * 600 + k + 1])
                                                                      for r in (0, 1) for k in range(600)]
  x = Tensor([1, 3, 3, 2, 3, 0])
  assert x.cummax(0)[1].tolist() == [0, 1, 2, 2, 4, 4] and x.cummin(0)[1].tolist() == [0, 0, 0, 0, 0, 5]  # the last met
  assert x.cumsum().dtype == dtypes.int64 and x.cumsum().tolist() == [1, 4, 7, 9, 12, 12]
  values, where = Tensor([2.0, 1.0, 2.0, 1.0]).sort()
  assert values.tolist() == [1.0, 1.0, 2.0, 2.0] and where.tolist() == [1, 3, 0, 2]  # stable
  assert Tensor([[3, 1, 2], [0, 5, 5]]).argsort(1, descending=True).tolist() == [[0, 2, 1], [1, 2, 0]]
  assert Tensor([[3, 1, 3], [0, 5, 5]]).argmax(1).tolist() == [0, 1] and \
    Tensor([[3, 1, 1]]).argmin(1, keepdim=True).tolist() == [[1]]
  assert Tensor([[1.0, 7.0], [9.0, 2.0]]).argmax().tolist() == 2 and Tensor([True, False]).any().tolist() is True
  assert Tensor([[True, False], [True, True]]).all(1).tolist() == [False, True] and \
    Tensor.ones(0).all().tolist() is True

MOVE_COMPOSITES = [  # (name, tiny, reference on Ref, input shape)
  ("split", lambda t: t.split([2, 3], 1)[1], lambda x: x.shrink(((0, 3), (2, 5), (0, 2))), (3, 5, 2)),
  ("chunk", lambda t: t.chunk(2, 1)[1], lambda x: x.shrink(((0, 3), (3, 5), (0, 2))), (3, 5, 2)),
  ("repeat", lambda t: t.repeat(2, 1, 3),
   lambda x: x.made((6, 5, 6), lambda i: x.at((i[0] % 3, i[1], i[2] % 2))), (3, 5, 2)),
  ("repeat_interleave", lambda t: t.repeat_interleave(2, 1),
   lambda x: x.made((3, 10, 2), lambda i: x.at((i[0], i[1] // 2, i[2]))), (3, 5, 2)),
  ("roll", lambda t: t.roll((2, -1), (1, 0)),
   lambda x: x.made(x.shape, lambda i: x.at(((i[0] + 1) % 3, (i[1] - 2) % 5, i[2]))), (3, 5, 2)),
  ("unfold", lambda t: t.unfold(1, 2, 2),
   lambda x: x.made((3, 2, 2, 2), lambda i: x.at((i[0], i[1] * 2 + i[3], i[2]))), (3, 5, 2)),
  ("diagonal", lambda t: t.diagonal(1, 0, 1),
   lambda x: x.made((2, 3), lambda i: x.at((i[1], i[1] + 1, i[0]))), (3, 5, 2)),
  ("diag", lambda t: t.diag(), lambda x: x.made((4, 4), lambda i: x.at((i[0],)) if i[0] == i[1] else 0.0), (4,)),
  ("tril", lambda t: t.tril(1), lambda x: x.made(x.shape, lambda i: x.at(i) if i[1] <= i[0] + 1 else 0.0), (3, 5)),
  ("triu", lambda t: t.triu(-1), lambda x: x.made(x.shape, lambda i: x.at(i) if i[1] >= i[0] - 1 else 0.0), (3, 5)),
  ("pad_to", lambda t: t.pad_to(4, None), lambda x: x.pad(((0, 1), (0, 0))), (3, 5)),
  ("rearrange", lambda t: t.rearrange("a (b c) d -> (d a) c b", c=1),
   lambda x: x.made((6, 1, 5), lambda i: x.at((i[0] % 3, i[2], i[0] // 3))), (3, 5, 2)),
  ("einsum", lambda t: Tensor.einsum("ijk->kj", t),
   lambda x: x.made((2, 5), lambda i: sum(x.at((a, i[1], i[0])) for a in range(3))), (3, 5, 2))]

@pytest.mark.parametrize("name,fn,ref,shape", MOVE_COMPOSITES, ids=[c[0] for c in MOVE_COMPOSITES])
def test_movement_composites_match_their_index_maps(name, fn, ref, shape):
  check_op(fn, ref, (_vals(random.Random(name), math.prod(shape)), shape))

def _pick_ref(x:Ref, pick) -> Ref:  # x[i, j] for index lists i (dim 0) and j (dim 2): broadcast, out of range -> 0
  n = len(pick[0])
  return x.made((n, x.shape[1]), lambda idx: x.at((pick[0][idx[0]], idx[1], pick[1][idx[0]]))
                if 0 <= pick[0][idx[0]] < x.shape[0] and 0 <= pick[1][idx[0]] < x.shape[2] else 0.0)

def test_indexing_with_tensors_in_any_position_against_numpys_rules():
  x = Tensor.arange(60).reshape(3, 4, 5)
  ref = [[[a * 20 + b * 5 + c for c in range(5)] for b in range(4)] for a in range(3)]
  assert x[Tensor([2, 0, -1])].tolist() == [ref[2], ref[0], ref[2]]
  assert x[:, Tensor([[1, 3]])].tolist() == [[[row[1], row[3]]] for row in ref]  # side by side: in place
  assert x[Tensor([0, 2]), :, Tensor([4, 1])].tolist() == [[ref[0][b][4] for b in range(4)],
                                                           [ref[2][b][1] for b in range(4)]]
  assert x[1, [0, 3], 2:4].tolist() == [ref[1][0][2:4], ref[1][3][2:4]]
  assert x[Tensor([[0], [2]]), Tensor([1, 3])].shape == (2, 2, 5)  # broadcast together
  assert x[x % 7 == 0].tolist() == [v for v in range(60) if v % 7 == 0]  # a bool tensor: where it is True
  assert x[Tensor([3, -4])].tolist() == [[[0] * 5] * 4] * 2  # out of range picks nothing: zeros, as tinygrad
  with pytest.raises(IndexError, match="ints"): x[Tensor([0.0])]
  rng = random.Random(3)
  vals, pick = _vals(rng, 3 * 4 * 5), ([2, 0, 1, 2], [4, 4, 0, 3])
  check_op(lambda t: t[Tensor(pick[0]), :, Tensor(pick[1])], lambda r: _pick_ref(r, pick), (vals, (3, 4, 5)))

def test_setitem_writes_in_place_as_an_assign():
  x = Tensor.zeros(3, 4).contiguous().realize()
  before = x + 0
  x[1] = 5.0
  x[:, 2:] = Tensor([7.0, 8.0])
  x[::2, 0] = Tensor([1.0, 2.0])  # a stride: scattered
  x[Tensor([2]), Tensor([1])] = -1.0
  assert x.tolist() == [[1.0, 0.0, 7.0, 8.0], [5.0, 5.0, 7.0, 8.0], [2.0, -1.0, 7.0, 8.0]]
  assert before.tolist() == [[0.0] * 4] * 3  # written before: kept its value
  x += 1
  assert x.tolist()[0] == [2.0, 1.0, 8.0, 9.0]

SETITEM = [((3, 7), (1, slice(None, None, -2))), ((5, 1, 3), (None, Ellipsis, 2)), ((7, 5), Tensor([4, -1, 4, 0])),
           ((3, 5, 6), (slice(None), [[2, 0], [2, 1]], slice(1, None, 3))), ((3, 5, 6), ([2, 0, 2], 1, [5, 0, 5])),
           ((3, 5, 6), (Tensor([[1], [0]]), slice(None, None, -1), Tensor([4, 3, 4]))),
           ((4, 3), Tensor([[True, False, True]] * 2 + [[False] * 3] + [[True] * 3])),
           ((4, 3, 2), Tensor([True, False, True, True]))]

@pytest.mark.parametrize("shape, key", SETITEM, ids=[str(i) for i in range(len(SETITEM))])
def test_setitem_writes_where_getitem_reads(shape, key):
  """x[key] = v puts v's elements where x[key] reads them (read as the places of a tensor of their numbers), the last
  one put on a place kept, as numpy's; every other element stays."""
  n = math.prod(shape)
  places = flat(Tensor.arange(n).reshape(shape)[key].tolist())
  x, v = rand_list(shape, 51), flat(rand_list((len(places),), 52))
  want = flat(x)
  for p, e in zip(places, v): want[p] = e
  t = Tensor(x).contiguous()
  t[key] = Tensor(v).reshape(Tensor.arange(n).reshape(shape)[key].shape)
  assert t.flatten().tolist() == want

def test_setitem_with_a_tensor_index_costs_what_the_tensor_does():
  """Rows written by a tensor index into a million elements: each place is matched against the rows' indices (3), not
  against every element written (3,000: a temporary of 3 billion elements); a bool mask writes each place with no
  match at all."""
  t = Tensor.zeros(1000, 1000, dtype=dtypes.int32).contiguous()
  rows = [[k * 1000 + j for j in range(1000)] for k in range(3)]
  t[Tensor([1, 5, 7])] = Tensor(rows, dtypes.int32)
  got = t.tolist()
  assert [got[1], got[5], got[7]] == rows and sum(map(sum, got)) == sum(map(sum, rows))
  t[t > 500] = 0  # (a mask: each place where it is True, with no pick)
  assert t.tolist() == [[v if v <= 500 else 0 for v in row] for row in got]
  with pytest.raises(tiny.ShapeError): t[t > 500] = Tensor([[1], [2], [3]], dtypes.int32)  # (not broadcast: numpy's)

def test_gather_scatter_and_their_reductions():
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  assert x.gather(1, Tensor([[2, 0], [1, 1]])).tolist() == [[3.0, 1.0], [5.0, 5.0]]
  assert x.gather(0, Tensor([[1, 0, 1]])).tolist() == [[4.0, 2.0, 6.0]]
  idx, src = Tensor([[0, 1, 0], [0, 0, 1]]), Tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
  assert Tensor.zeros(2, 3).scatter(0, Tensor([[1, 0, 1]]), src).tolist() == [[0.0, 20.0, 0.0], [10.0, 0.0, 30.0]]
  base, i, s = [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]], [[0, 1, 0], [0, 0, 1]], [[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]]
  combine = {"sum": sum, "prod": math.prod, "amax": max, "amin": min, "mean": lambda v: sum(v) / len(v)}
  for reduce, f in combine.items():
    for own in (True, False):  # out[i[r][c]][c] gathers src[r][c], with base's own value where include_self
      want = [[f(([base[r][c]] if own else []) + [s[k][c] for k in range(2) if i[k][c] == r]) if own or
               any(i[k][c] == r for k in range(2)) else base[r][c] for c in range(3)] for r in range(2)]
      assert Tensor(base).scatter_reduce(0, Tensor(i), Tensor(s), reduce, include_self=own).tolist() == want, reduce
  base = Tensor(base)
  assert base.scatter(1, Tensor([[2], [0]]), 9.0, reduce="add").tolist() == [[1.0, 1.0, 10.0], [11.0, 2.0, 2.0]]
  assert Tensor([[0, 3], [1, 0]]).nonzero().tolist() == [[0, 1], [1, 0]] and Tensor([0, 0]).nonzero().shape == (0, 1)
  filled = Tensor([[0, 3], [1, 0]]).nonzero(size=3, fill_value=-1.5)  # (cut or filled, and int whatever fills it)
  assert filled.dtype == dtypes.int32 and filled.tolist() == [[0, 1], [1, 0], [-1, -1]]
  assert Tensor([0, 3, 4]).nonzero(size=1).tolist() == [[1]] and Tensor(5).nonzero(size=4).shape == (4, 0)
  assert x.masked_select(Tensor([True, False, True])).tolist() == [1.0, 3.0, 4.0, 6.0]
  check_op(lambda t: t.gather(1, Tensor([[2, 0, 2], [1, 1, 0]])),
           lambda r: r.made((2, 3), lambda i: r.at((i[0], [[2, 0, 2], [1, 1, 0]][i[0]][i[1]]))),
           (_vals(random.Random(1), 8), (2, 4)))

def _pool_ref(x:Ref, k, s, pads, combine, fill):  # every output: combine() of its window, fill outside the input
  (n, c, h, w), (kh, kw), (sh, sw) = x.shape, k, s
  (pt, pb), (pl, pr) = pads
  oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
  def at(b, ch, i, j): return x.at((b, ch, i, j)) if 0 <= i < h and 0 <= j < w else fill
  return x.made((n, c, oh, ow), lambda idx: combine([at(idx[0], idx[1], idx[2] * sh + a - pt, idx[3] * sw + e - pl)
                                                     for a in range(kh) for e in range(kw)]))

def test_pools_match_their_windows():
  rng = random.Random(6)
  vals = _vals(rng, 2 * 3 * 7 * 6)
  check_op(lambda t: t.max_pool2d((3, 2), stride=2, padding=1),
           lambda r: _pool_ref(r, (3, 2), (2, 2), ((1, 1), (1, 1)), max, -math.inf),
           (vals, (2, 3, 7, 6)))
  check_op(lambda t: t.avg_pool2d(3, stride=(2, 1)),
           lambda r: _pool_ref(r, (3, 3), (2, 1), ((0, 0), (0, 0)), lambda v: sum(v) / 9, 0.0),
           (vals, (2, 3, 7, 6)))
  out = Tensor(vals).reshape(2, 3, 7, 6).avg_pool2d(2, padding=1, count_include_pad=False)
  assert_close(flat(out.tolist()),
               _pool_ref(Ref(vals, (2, 3, 7, 6)), (2, 2), (2, 2), ((1, 1), (1, 1)),
                         lambda v: sum(u for u in v if u is not None) / sum(u is not None for u in v), None).vals,
               rtol=1e-5)
  assert Tensor.ones(1, 1, 5, 5).max_pool2d(2, ceil_mode=True).shape == (1, 1, 3, 3)
  v, where = Tensor([[[[1.0, 5.0, 2.0], [5.0, 0.0, 7.0]]]]).max_pool2d((2, 2), stride=1, return_indices=True)
  assert v.tolist() == [[[[5.0, 7.0]]]] and where.tolist() == [[[[1, 5]]]]  # the first of a tie, flat in the plane
  assert v.max_unpool2d(where, (2, 2), stride=1).tolist() == [[[[0.0, 5.0, 0.0], [0.0, 0.0, 7.0]]]]

def _conv_transpose_ref(x:Ref, w:Ref, stride, padding, dilation, groups) -> Ref:  # each input spread over its window
  (n, c, h, wd), (_, per, kh, kw) = x.shape, w.shape
  size = [(m - 1) * s - 2 * p + d * (k - 1) + 1 for m, s, p, d, k in zip((h, wd), stride, padding, dilation, (kh, kw))]
  out = collections.defaultdict(float)
  for b, ic, p, q, oc, a, e in itertools.product(range(n), range(c), range(h), range(wd),
                                                 range(per), range(kh), range(kw)):
    i, j = p * stride[0] - padding[0] + a * dilation[0], q * stride[1] - padding[1] + e * dilation[1]
    if 0 <= i < size[0] and 0 <= j < size[1]:
      out[(b, ic // (c // groups) * per + oc, i, j)] += x.at((b, ic, p, q)) * w.at((ic, oc, a, e))
  return x.made((n, per * groups, *size), lambda idx: out[tuple(idx)])

@pytest.mark.parametrize("stride,padding,dilation,groups", [((1, 1), (0, 0), (1, 1), 1), ((2, 2), (1, 1), (1, 1), 1),
                                                            ((2, 3), (1, 0), (2, 2), 2)])
def test_conv_transpose2d_matches_a_direct_spread(stride, padding, dilation, groups):
  rng = random.Random(str(stride))
  x, w = _vals(rng, 4 * 4 * 3), _vals(rng, 4 * 2 * 3 * 2)
  check_op(lambda a, b: a.conv_transpose2d(b, stride=stride, padding=padding, dilation=dilation, groups=groups),
           lambda a, b: _conv_transpose_ref(a, b, stride, padding, dilation, groups),
           (x, (1, 4, 4, 3)), (w, (4, 2, 3, 2)))

def test_conv_transpose2d_to_an_empty_output_is_empty():  # (as torch's: the padding cuts every row)
  y = Tensor.ones(1, 2, 2, 4).conv_transpose2d(Tensor.ones(2, 2, 1, 2), groups=2, stride=(1, 3), dilation=(2, 2),
                                               padding=(1, 1), output_padding=(0, 2))
  assert y.shape == (1, 4, 0, 12) and y.tolist() == [[[], [], [], []]]

def test_an_int_image_interpolates_to_the_nearest_value():  # (as torch's: not truncated)
  x = Tensor([[[[0, 3, 7, 200]]]], dtype=dtypes.uint8).interpolate((1, 7), mode="linear", align_corners=True)
  assert x.dtype == dtypes.uint8 and x.tolist() == [[[[0, 2, 3, 5, 7, 104, 200]]]]

def test_a_float64_image_interpolates_in_float64():  # (its source places too, as torch's: not rounded to float32)
  rng = random.Random(11)
  x = [[rng.uniform(-1, 1) for _ in range(5)] for _ in range(11)]
  def lerped(row, m):  # one dim, pixel centers: the two nearest inputs lerped
    n, out = len(row), []
    for o in range(m):
      p = max((o + 0.5) * n / m - 0.5, 0.0)
      i = min(int(p), n - 1)
      out.append(row[i] + (p - i) * (row[min(i + 1, n - 1)] - row[i]))
    return out
  cols = [lerped([x[i][j] for i in range(11)], 7) for j in range(5)]  # (the first dim first, as interpolate does)
  want = [lerped([cols[j][i] for j in range(5)], 8) for i in range(7)]
  got = Tensor([[x]], dtype=dtypes.float64).interpolate((7, 8)).tolist()[0][0]
  assert all(abs(g - w) < 1e-13 for gr, wr in zip(got, want) for g, w in zip(gr, wr))
  with pytest.raises(ValueError, match="align_corners"):
    Tensor([[x]]).interpolate((7, 8), "nearest", align_corners=True)

def test_interpolate_sdpa_and_einsum_match_their_formulas():
  rng = random.Random(10)
  vals = Tensor(_vals(rng, 1 * 2 * 3 * 4)).tolist()  # (float32 values: nearest picks them exactly)
  def bilinear(r, size, align):
    def src(o, n, m): return o * (n - 1) / (m - 1) if align else max((o + 0.5) * n / m - 0.5, 0)
    def at(idx):
      out = 0.0
      (i0, fi), (j0, fj) = [(min(int(p), n - 1), p - min(int(p), n - 1)) for p, n in
                            ((src(idx[2], 3, size[0]), 3), (src(idx[3], 4, size[1]), 4))]
      for a, wa in ((i0, 1 - fi), (min(i0 + 1, 2), fi)):
        for b, wb in ((j0, 1 - fj), (min(j0 + 1, 3), fj)): out += wa * wb * r.at((idx[0], idx[1], a, b))
      return out
    return r.made((1, 2) + size, at)
  for align in (False, True):
    check_op(lambda t: t.interpolate((5, 3), align_corners=align), lambda r: bilinear(r, (5, 3), align),
             (vals, (1, 2, 3, 4)))
  near = Tensor(vals).reshape(1, 2, 3, 4).interpolate((5, 7), mode="nearest")
  assert flat(near.tolist()) == [vals[c * 12 + min(i * 3 // 5, 2) * 4 + min(j * 4 // 7, 3)]
                                 for c in range(2) for i in range(5) for j in range(7)]
  q, k, v = _vals(rng, 2 * 3 * 4), _vals(rng, 2 * 5 * 4), _vals(rng, 2 * 5 * 3)
  def attention(qr, kr, vr, causal=False):
    def out(idx):
      b, i, d = idx
      s = [sum(qr.at((b, i, e)) * kr.at((b, j, e)) for e in range(4)) / 2 for j in range(5)]
      s = [v if not causal or j <= i else -math.inf for j, v in enumerate(s)]
      m = max(s); p = [math.exp(v - m) for v in s]
      return sum(pj * vr.at((b, j, d)) for j, pj in enumerate(p)) / sum(p)
    return qr.made((2, 3, 3), out)
  check_op(lambda a, b, c: a.scaled_dot_product_attention(b, c), attention,
           (q, (2, 3, 4)), (k, (2, 5, 4)), (v, (2, 5, 3)))
  check_op(lambda a, b, c: a.scaled_dot_product_attention(b, c, is_causal=True),
           lambda a, b, c: attention(a, b, c, True), (q, (2, 3, 4)), (k, (2, 5, 4)), (v, (2, 5, 3)))
  check_op(lambda a, b: Tensor.einsum("bij,bjk->bik", a, b), lambda a, b: a.made((2, 3, 5), lambda i: sum(
    a.at((i[0], i[1], j)) * b.at((i[0], j, i[2])) for j in range(4))), (q, (2, 3, 4)), (k, (2, 4, 5)))

def test_einsum_of_a_repeated_letter_takes_the_diagonal():
  x = rand_list((3, 3, 5), 41)
  got = Tensor.einsum("iij->j", Tensor(x)).tolist()
  assert_close(got, [sum(x[i][i][j] for i in range(3)) for j in range(5)])
  m = rand_list((4, 4), 42)
  assert_close(Tensor.einsum("ii->i", Tensor(m)).tolist(), [m[i][i] for i in range(4)])
  assert Tensor.einsum("ii", Tensor(m)).item() == pytest.approx(sum(m[i][i] for i in range(4)), rel=1e-6)

def test_var_mean_and_std_mean_are_the_two_reduces():
  x = rand_list((3, 7), 43)
  var, mean = Tensor(x).var_mean(1)
  std, mean2 = Tensor(x).std_mean(1, correction=0)
  assert_close(var.tolist(), [_var(r) for r in x])
  assert_close(mean.tolist(), [sum(r) / 7 for r in x])
  assert_close(std.tolist(), [_var(r, 0) ** 0.5 for r in x])
  assert mean2.tolist() == mean.tolist()

@pytest.mark.parametrize("name, x", [("exp", 10.0), ("asinh", 300.0), ("acosh", 300.0), ("cos", 1.57), ("tan", 1.2),
                                     ("sinh", 5.0), ("tanh", 0.3), ("sigmoid", -3.0), ("erf", 0.7), ("log", 3.0)])
def test_a_half_transcendental_is_computed_in_float32_and_rounded_once(name, x):  # as torch's
  want = (lambda v: 1 / (1 + math.exp(-v))) if name == "sigmoid" else getattr(math, name)
  assert getattr(Tensor([x], dtype=dtypes.half), name)().item() == f16(want(f16(x)))

def test_a_0d_bool_index_adds_a_dim_of_one_or_none_and_masked_select_broadcasts_self():  # (numpy's, torch's)
  x = Tensor([[1.0, 2.0], [3.0, 4.0]])
  assert x[Tensor(False)].shape == (0, 2, 2) and x[Tensor(True)].tolist() == [[[1.0, 2.0], [3.0, 4.0]]]
  assert x[0, Tensor(True)].tolist() == [[1.0, 2.0]]
  assert x[Tensor(True), Tensor([1, 0])].tolist() == [[3.0, 4.0], [1.0, 2.0]]  # (one index with the int tensors)
  with pytest.raises(IndexError): x[Tensor(False), Tensor([1, 0])]
  row, mask = [1.0, -2.0, 3.0], [[True, False, True], [False, True, False]]
  assert Tensor(row).masked_select(Tensor(mask)).tolist() == [1.0, 3.0, -2.0]

def test_a_0d_tensor_takes_dim_0_or_minus_1_where_torch_does():  # (its only place is 0)
  t = Tensor(5.0)
  assert t.argmax(0).item() == 0 and t.argmin(-1).item() == 0 and t.argmax(0, keepdim=True).shape == ()
  assert [x.item() for x in t.topk(1)] == [5.0, 0] and t.transpose(0, -1).item() == 5.0
  assert t.gather(0, Tensor(0)).item() == 5.0
  with pytest.raises(IndexError): t.argmax(1)

def test_a_scan_of_a_0d_tensor_is_its_value():  # (torch's cumsum and cummax of a scalar, along dim 0)
  values, index = Tensor(3.5).cummax(0)
  assert Tensor(3.5).cumsum(0).item() == 3.5 and values.item() == 3.5 and index.item() == 0

def test_to_copies_to_another_device_and_replace_stands_for_another_value():
  t = Tensor([1.5, -2.0, 3.0])
  assert t.to("CPU") is t
  moved = t.to("PYTHON")
  assert moved.device == "PYTHON" and moved.tolist() == [1.5, -2.0, 3.0] and (moved * 2).tolist() == [3.0, -4.0, 6.0]
  u = Tensor([0.0, 0.0, 0.0])
  assert u.replace(t * 2) is u and u.tolist() == [3.0, -4.0, 6.0]
  with pytest.raises(tiny.ShapeError, match="replace"): u.replace(Tensor([1.0]))
  # writes pending into either run first: a's isn't shared with b (b's later write leaves a as it is), and the write
  # into c reaches r, which shares c's buffer
  a, b = Tensor([1.0, 2.0]).contiguous().realize(), Tensor([5.0, 6.0]).contiguous().realize()
  a.assign(Tensor([3.0, 4.0]))
  b.replace(a).assign(Tensor([9.0, 9.0]))
  assert a.tolist() == [3.0, 4.0] and b.tolist() == [9.0, 9.0]
  c = Tensor([1.0, 2.0, 3.0, 4.0]).contiguous().realize()
  r = c.reshape(2, 2)
  c[0] = 9.0
  c.replace(Tensor([5.0, 6.0, 7.0, 8.0]))
  assert r.tolist() == [[9.0, 2.0], [3.0, 4.0]] and c.tolist() == [5.0, 6.0, 7.0, 8.0]

def test_a_schedule_runs_through_run_schedule_and_its_outputs_are_kept():
  a, b = realized((5, 7), (5, 7), seed=44)
  out = (a * b + 1).softmax(-1)
  items = tiny.schedule([out])
  assert tiny.run_schedule(items, wait=True) > 0
  assert tiny.schedule([out]) == []  # computed: nothing left to run
  rows = [[x * y + 1 for x, y in zip(ra, rb)] for ra, rb in zip(a.tolist(), b.tolist())]
  want = [[math.exp(v - max(r)) / sum(math.exp(w - max(r)) for w in r) for v in r] for r in rows]
  assert_close(flat(out.tolist()), flat(want))

def test_losses_match_their_formulas():
  rng = random.Random(11)
  logits, labels = _vals(rng, 5 * 7), [3, 0, 6, 6, 1]
  def lsm(r, i): return [r.at((i, c)) - _lse([r.at((i, d)) for d in range(7)]) for c in range(7)]
  ce = lambda r: Ref([-sum(lsm(r, i)[labels[i]] for i in range(5)) / 5], ())  # noqa: E731
  check_op(lambda t: t.cross_entropy(Tensor(labels)), ce, (logits, (5, 7)))
  check_op(lambda t: t.sparse_categorical_crossentropy(Tensor(labels)), ce, (logits, (5, 7)))
  smooth = lambda r: Ref([-sum(0.9 * lsm(r, i)[labels[i]] + 0.1 * sum(lsm(r, i)) / 7  # noqa: E731
                               for i in range(5)) / 5], ())
  check_op(lambda t: t.cross_entropy(Tensor(labels), label_smoothing=0.1), smooth, (logits, (5, 7)))
  check_op(lambda t: t.log_softmax(1).nll_loss(Tensor(labels), reduction="sum"),
           lambda r: Ref([-sum(lsm(r, i)[labels[i]] for i in range(5))], ()), (logits, (5, 7)))
  ws = [0.5 + k / 7 for k in range(7)]  # class weights: picked by the labels, a gather inside the loss's reduce
  check_op(lambda t: t.log_softmax(1).nll_loss(Tensor(labels), weight=Tensor(ws)),
           lambda r: Ref([-sum(ws[labels[i]] * lsm(r, i)[labels[i]] for i in range(5))
                          / sum(ws[y] for y in labels)], ()),
           (logits, (5, 7)))
  assert_close(Tensor(logits).reshape(5, 7).sparse_categorical_crossentropy(Tensor(labels), ignore_index=6).item(),
               -sum(lsm(Ref(logits, (5, 7)), i)[labels[i]] for i in (0, 1, 4)) / 3, rtol=1e-5)
  p, y = [rng.uniform(0.1, 0.9) for _ in range(6)], [rng.uniform(0, 1) for _ in range(6)]
  bce = lambda r: Ref([-sum(t * math.log(v) + (1 - t) * math.log(1 - v)  # noqa: E731
                            for v, t in zip(r.vals, y)) / 6], ())
  check_op(lambda t: t.binary_crossentropy(Tensor(y)), bce, (p, (6,)))
  check_op(lambda t: t.binary_crossentropy_logits(Tensor(y)),
           lambda r: bce(r.map(lambda v: 1 / (1 + math.exp(-v)))), ([math.log(v / (1 - v)) for v in p], (6,)))
  with pytest.raises(ValueError, match="reduction"): Tensor(p).binary_crossentropy(Tensor(y), reduction="avg")

def test_a_gather_in_a_kernel_the_heuristic_tiles():  # (a load whose address reads memory has no stride to tile by)
  rng = random.Random(13)
  x, y = _vals(rng, 32 * 10), [rng.randrange(10) for _ in range(32)]
  t = Tensor(x).reshape(32, 10)
  t.log_softmax(1).nll_loss(Tensor(y)).realize()  # the forward pass realized first: its gradient's kernels differ
  g, = t.log_softmax(1).nll_loss(Tensor(y)).sum().gradient(t)
  def row_grad(i):  # (softmax - one hot) / rows
    e = [math.exp(v - max(x[i * 10:i * 10 + 10])) for v in x[i * 10:i * 10 + 10]]
    return [(p / sum(e) - (c == y[i])) / 32 for c, p in enumerate(e)]
  assert_close(g.tolist(), [row_grad(i) for i in range(32)], rtol=1e-4, atol=1e-6)

def test_creation_and_random_composites():
  assert Tensor.randn(2, 3, requires_grad=True).requires_grad and Tensor.zeros(2).requires_grad is None
  assert Tensor.ones(2).ones_like(requires_grad=False).requires_grad is False  # (as tinygrad's creation methods)
  assert_close(Tensor.linspace(-1, 2, 7).tolist(), [-1 + 0.5 * k for k in range(7)])
  assert Tensor.linspace(3, 9, 1).tolist() == [3.0] and Tensor([0, 2]).one_hot(3).tolist() == [[1, 0, 0], [0, 0, 1]]
  a, b = Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))
  assert a.tolist() == [[1, 1, 1], [2, 2, 2]] and b.tolist() == [[3, 4, 5], [3, 4, 5]]
  assert Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]), indexing="xy")[0].shape == (3, 2)
  Tensor.manual_seed(1)
  r = Tensor.randint(200, low=-3, high=4).tolist()
  assert set(r) == set(range(-3, 4)) and sorted(Tensor.randperm(50).tolist()) == list(range(50))
  n = Tensor.normal(4000, mean=2.0, std=0.5).tolist()
  assert abs(sum(n) / 4000 - 2.0) < 0.05 and abs(_var(n) ** 0.5 - 0.5) < 0.05
  draws = Tensor([0.0, 1.0, 3.0]).multinomial(3000, replacement=True).tolist()
  assert draws.count(0) == 0 and abs(draws.count(2) / 3000 - 0.75) < 0.04
  assert sorted(Tensor([1.0, 1.0, 1.0, 1.0]).multinomial(4).tolist()) == [0, 1, 2, 3]  # without replacement
  x = Tensor.ones(1000)
  assert x.dropout(0.3) is x  # not training: nothing dropped
  with Tensor.train():
    kept = x.dropout(0.3).tolist()
  assert set(kept) == {0.0, Tensor([1 / 0.7]).item()} and abs(kept.count(0.0) / 1000 - 0.3) < 0.05
  t = Tensor([[1.0, 2.0]])
  assert t.size() == (1, 2) and t.size(-1) == 2 and t.element_size() == 4 and t.is_floating_point()
  assert t.data().tolist() == [[1.0, 2.0]] and Tensor([1, 2]).bitcast(dtypes.uint32).tolist() == [1, 2]
  assert [Tensor([-1.0], device=d).bitcast(dtypes.int).item() for d in ('CPU', 'PYTHON')] == [-1082130432] * 2
  assert t.long().dtype == dtypes.int64


# --- weights on disk

class _Net:
  def __init__(self):
    self.l1, self.layers = tiny.nn.Linear(5, 3), [tiny.nn.LayerNorm(3), tiny.nn.BatchNorm(3)]
    self.conv = tiny.nn.Conv2d(2, 4, 3, bias=False)

def test_state_dict_names_match_tinygrad():
  assert list(tiny.nn.state.get_state_dict(_Net())) == [
    "l1.weight", "l1.bias", "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
    "layers.1.num_batches_tracked", "layers.1.running_mean", "layers.1.running_var", "conv.weight"]
  net = _Net()
  assert all(t.requires_grad for t in [net.l1.weight, net.l1.bias, net.conv.weight, net.layers[1].weight])
  assert not net.layers[1].running_mean.requires_grad and len(tiny.nn.state.get_parameters(net)) == 10

def _set(layer, **values):  # a layer's parameters set to these nested lists
  for name, v in values.items(): getattr(layer, name).assign(Tensor(v)).realize()
  return layer

def _normed(vals, eps):  # each value less their mean, over their standard deviation (biased), in float64
  m = sum(vals) / len(vals)
  return [(v - m) / math.sqrt(sum((u - m) ** 2 for u in vals) / len(vals) + eps) for v in vals]

def test_group_instance_rms_and_layer2d_norms_match_their_formulas():
  n, c, l = 2, 6, 5
  x, w, b = rand_list((n, c, l), 51), rand_list((c,), 52), rand_list((c,), 53)
  for groups, layer in ((3, tiny.nn.GroupNorm(3, c)), (c, tiny.nn.InstanceNorm(c))):
    got = _set(layer, weight=w, bias=b)(Tensor(x)).tolist()
    per = c // groups
    want = [[[0.0] * l for _ in range(c)] for _ in range(n)]
    for i in range(n):
      for g in range(groups):
        chans = range(g * per, (g + 1) * per)
        normed = _normed([x[i][k][j] for k in chans for j in range(l)], 1e-5)
        for k in chans:
          for j in range(l): want[i][k][j] = normed[(k - g * per) * l + j] * w[k] + b[k]
    assert_close(got, want, rtol=1e-4, atol=1e-5)
  rows, scale = rand_list((3, 7), 54), rand_list((7,), 55)
  got = _set(tiny.nn.RMSNorm(7), weight=scale)(Tensor(rows)).tolist()
  assert_close(got, [[v / math.sqrt(sum(u * u for u in r) / 7 + 1e-6) * s for v, s in zip(r, scale)] for r in rows],
               rtol=1e-4, atol=1e-5)
  assert tiny.nn.RMSNorm(7, elementwise_affine=False)(Tensor(rows, dtype=dtypes.half)).dtype == dtypes.half
  img = rand_list((2, 3, 2, 4), 56)
  got = tiny.nn.LayerNorm2d(3)(Tensor(img)).tolist()  # over the channels of each pixel
  for i, y, xx in itertools.product(range(2), range(2), range(4)):
    assert_close([got[i][k][y][xx] for k in range(3)], _normed([img[i][k][y][xx] for k in range(3)], 1e-5),
                 rtol=1e-4, atol=1e-5)

def test_conv1d_and_transposed_conv_layers_match_their_formulas():
  x = rand_list((2, 3, 11), 57)
  conv = _set(tiny.nn.Conv1d(3, 4, 3, stride=2, padding=1, dilation=2), weight=rand_list((4, 3, 3), 58),
              bias=rand_list((4,), 59))
  w, b = conv.weight.tolist(), conv.bias.tolist()
  def at(i, k, p): return x[i][k][p] if 0 <= p < 11 else 0.0
  want = [[[b[o] + sum(w[o][k][t] * at(i, k, j * 2 - 1 + t * 2) for k in range(3) for t in range(3))
            for j in range(5)] for o in range(4)] for i in range(2)]
  assert_close(conv(Tensor(x)).tolist(), want, rtol=1e-4, atol=1e-5)
  up = _set(tiny.nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1), weight=rand_list((3, 4, 3), 60),
            bias=rand_list((4,), 61))
  w, b = up.weight.tolist(), up.bias.tolist()
  size = (11 - 1) * 2 - 2 + 3 + 1
  want = [[[b[o]] * size for o in range(4)] for _ in range(2)]
  for i, k, j, o, t in itertools.product(range(2), range(3), range(11), range(4), range(3)):
    if 0 <= j * 2 - 1 + t < size: want[i][o][j * 2 - 1 + t] += x[i][k][j] * w[k][o][t]  # each input spread out
  assert_close(up(Tensor(x)).tolist(), want, rtol=1e-4, atol=1e-5)
  assert tiny.nn.ConvTranspose2d(3, 8, (2, 3), groups=2).weight.shape == (3, 4, 2, 3)

def test_load_state_dict_copies_values_and_names_what_is_wrong():
  a, b = _Net(), _Net()
  tiny.nn.state.load_state_dict(b, tiny.nn.state.get_state_dict(a))
  for (k, x), y in zip(tiny.nn.state.get_state_dict(a).items(), tiny.nn.state.get_state_dict(b).values()):
    assert x.tolist() == y.tolist(), k
  state = tiny.nn.state.get_state_dict(a)
  with pytest.raises(KeyError, match="l1.bias"):
    tiny.nn.state.load_state_dict(b, {k: v for k, v in state.items() if k != "l1.bias"})
  with pytest.raises(ValueError, match="l1.weight"):
    tiny.nn.state.load_state_dict(b, {**state, "l1.weight": Tensor.zeros(5, 3)})
  # a 0-d tensor saved as (1,) (an older num_batches_tracked) loads, as tinygrad's; a BatchNorm without running
  # statistics still counts its batches (tinygrad's state dict)
  bn = tiny.nn.BatchNorm(3)
  tiny.nn.state.load_state_dict(bn, {**tiny.nn.state.get_state_dict(bn), "num_batches_tracked": Tensor([7])})
  assert bn.num_batches_tracked.shape == () and bn.num_batches_tracked.item() == 7
  assert list(tiny.nn.state.get_state_dict(tiny.nn.BatchNorm(3, track_running_stats=False))) == \
    ["weight", "bias", "num_batches_tracked"]

def test_safetensors_round_trip_every_dtype(tmp_path):
  tensors = {"f": Tensor([[1.5, -2.0, 3.25]]), "h": Tensor([0.5, 65504.0], dtype=dtypes.half),
             "i": Tensor([-7, 2**31 - 1]), "q": Tensor([2**40, -1], dtype=dtypes.long),
             "u": Tensor([0, 255], dtype=dtypes.uint8), "b": Tensor([True, False, True]), "empty": Tensor.zeros(0, 3),
             "s": Tensor([-2**15, 7], dtype=dtypes.short), "us": Tensor([65535], dtype=dtypes.ushort),
             "d": Tensor([0.1, -1e300], dtype=dtypes.double), "bf": Tensor([1.5, -3.0], dtype=dtypes.bfloat16)}
  tiny.nn.state.safe_save(tensors, tmp_path / "w.safetensors", metadata={"format": "pt"})
  loaded = tiny.nn.state.safe_load(tmp_path / "w.safetensors")
  for k, t in tensors.items():
    assert (loaded[k].dtype, loaded[k].shape, loaded[k].tolist()) == (t.dtype, t.shape, t.tolist())

def test_safetensors_bfloat16_loads_as_bfloat16(tmp_path):  # BF16: a float32's top 16 bits, little-endian
  header = json.dumps({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
  (tmp_path / "b.safetensors").write_bytes(struct.pack("<Q", len(header)) + header +
                                           struct.pack("<4H", 0x3f80, 0xc020, 0x7f80, 0x0001))
  w = tiny.nn.state.safe_load(tmp_path / "b.safetensors")["w"]
  assert w.dtype == dtypes.bfloat16 and w.tolist() == [[1.0, -2.5], [math.inf, 2**-133]]
  tiny.nn.state.safe_save({"w": w}, tmp_path / "again.safetensors")
  assert (tmp_path / "again.safetensors").read_bytes()[-8:] == (tmp_path / "b.safetensors").read_bytes()[-8:]

def test_safetensors_file_written_from_the_format_definition_loads(tmp_path):
  data = struct.pack("<3f", 1.0, 2.0, -3.5) + struct.pack("<2h", -5, 300)
  header = json.dumps({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                       "__metadata__": {"x": "y"}, "b": {"dtype": "C64", "shape": [1, 2], "data_offsets": [12, 16]}})
  (tmp_path / "f.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + data)
  with pytest.raises(ValueError, match="C64"): tiny.nn.state.safe_load(tmp_path / "f.safetensors")  # no complex
  header = header.replace('"C64", "shape": [1, 2]', '"I16", "shape": [1, 2]')
  (tmp_path / "f.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + data)
  assert tiny.nn.state.safe_load(tmp_path / "f.safetensors")["b"].tolist() == [[-5, 300]]
  header = header.replace('"I16", "shape": [1, 2]', '"U8", "shape": [2, 2]')
  (tmp_path / "f.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + data)
  got = tiny.nn.state.safe_load(tmp_path / "f.safetensors")
  assert got["a"].tolist() == [1.0, 2.0, -3.5] and got["b"].tolist() == [[251, 255], [44, 1]]

def test_damaged_safetensors_files_raise_naming_why(tmp_path):
  good = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
  cases = {"length": struct.pack("<Q", 10**6) + good, "json": struct.pack("<Q", 5) + b"{nope" + b"\0" * 8,
           "offsets": struct.pack("<Q", len(good)) + good + b"\0" * 4,
           "dtype": struct.pack("<Q", len(good)) + good.replace(b"F32", b"Q99") + b"\0" * 8}
  def headed(header): return struct.pack("<Q", len(header)) + header + b"\0" * 8
  cases |= {"list": headed(b"[1, 2]"), "keys": headed(b'{"a": {"dtype": "F32"}}'),
            "shape": headed(good.replace(b"[2]", b"[-2]")), "pair": headed(good.replace(b"[0, 8]", b'["0", 8]')),
            "other": headed(good.replace(b'"shape"', b'"shap"')),  # a key of its own, and none named shape
            "true": headed(good.replace(b"[2]", b"[true]")), "bool": headed(good.replace(b"[0, 8]", b"[false, 8]"))}
  for why, raw in cases.items():
    (tmp_path / why).write_bytes(raw)
    with pytest.raises(ValueError, match={"length": "header length", "json": "JSON", "offsets": "bytes 0 to 8",
                                          "dtype": "Q99", "list": "JSON object", "keys": "data_offsets",
                                          "shape": "shape", "pair": "offsets", "other": "data_offsets",
                                          "true": "shape", "bool": "offsets"}[why]):
      tiny.nn.state.safe_load(tmp_path / why)


# --- training on real data: scikit-learn's 8x8 handwritten digits (shipped inside its wheel: nothing is downloaded)

def test_mlp_learns_handwritten_digits_eagerly_and_under_tinyjit():
  from sklearn.datasets import load_digits
  digits = load_digits()
  xs, ys = [[v / 16 for v in row] for row in digits.data.tolist()], digits.target.tolist()
  order = list(range(len(xs)))
  random.Random(0).shuffle(order)
  train, held_out = order[:1400], order[1400:]
  batches = [(Tensor([xs[i] for i in train[k:k + 50]]),
              Tensor([[float(ys[i] == c) for c in range(10)] for i in train[k:k + 50]])) for k in range(0, 1400, 50)]
  def fit(jit):
    Tensor.manual_seed(0)
    l1, l2 = tiny.nn.Linear(64, 48), tiny.nn.Linear(48, 10)
    opt = tiny.nn.optim.Adam(tiny.nn.state.get_parameters([l1, l2]), lr=0.01)
    def step(x, y):
      opt.zero_grad()
      loss = -l2(l1(x).relu()).log_softmax(-1).mul(y).sum(-1).mean()
      loss.backward()
      opt.step()
      return loss
    fn = tiny.TinyJit(step) if jit else step
    with Tensor.train():
      losses = [fn(*batches[k % len(batches)]).item() for k in range(4 * len(batches))]
    logits = l2(l1(Tensor([xs[i] for i in held_out])).relu()).tolist()
    right = sum(row.index(max(row)) == ys[i] for row, i in zip(logits, held_out))
    return losses, right / len(held_out)
  eager, jitted = fit(False), fit(True)
  assert eager == jitted
  assert eager[1] >= 0.95, f"held-out accuracy {eager[1]:.3f}"

# ------------------------------------------------------------------------------------------------------------------
# every kernel the test run lowered, in every GPU dialect: checked when the run ends (every_kernel_in_every_dialect)

def test_lowered_kernels_are_recorded():
  t = Tensor.empty(3, 5) * 7 - 1
  item, = tiny.schedule([t])
  tiny.render(t)
  assert (item.ast, tiny.getenv("NOOPT")) in LOWERED

def lowered_kernels() -> list[tuple]:
  """Every (kernel AST, NOOPT) lowered so far, after a few kernels of each kind (elementwise, reduce, shared memory,
  matmul, half, bfloat16, tensor cores) have been, so that a run of a few tests checks something."""
  a, b, c = Tensor.empty(7, 33), Tensor.empty(7, 33, dtype=dtypes.float16), Tensor.empty(7, 33, dtype=dtypes.bfloat16)
  tiny.render(a * 2 + 1, a.max(axis=1), a.softmax(), a @ a.T, (b * b).sum(), b.max(axis=1), c @ c.T, c.exp().max(1),
              *[Tensor.empty(32, 48, dtype=d) @ Tensor.empty(48, 16, dtype=d) for d in dtypes.narrow], device="CUDA")
  return list(LOWERED)

def rendered(monkeypatch, device: str) -> dict[str, tiny.Program]:
  """Each lowered kernel rendered for `device`, with the NOOPT it was lowered under; one entry per distinct source."""
  out = {}
  for ast, noopt in lowered_kernels():
    if device == "METAL" and any(u.dtype == dtypes.double for u in ast.toposort): continue  # (it has none: it says so)
    monkeypatch.setenv("NOOPT", str(noopt))
    prog = tiny.to_program(ast, device)
    out[prog.src] = prog
  return out

def compile_with_nvrtc(sources: list[str], arch: str):
  """Every CUDA source compiles with NVRTC for `arch`."""
  if arch == "sm_90":  # the same sources again, for a newer arch: every one with shared memory or half, and a sample
    sources = [s for i, s in enumerate(sources) if i % 12 == 0 or "__shared__" in s or "half" in s or "bfloat16" in s]
  # many kernels to an NVRTC program, a third of the time of one each (a program's cost is much in what it includes);
  # a program that fails compiles its kernels one by one, where a CompileError names the kernel, its log and source.
  # Separate programs compile at once (ctypes lets go of the GIL)
  def compiled(batch: list[str]) -> list[bytes]:
    try: return [cuda_rt.nvrtc_compile(one_program(batch), arch)]
    except cuda_rt.CompileError: return [cuda_rt.nvrtc_compile(src, arch) for src in batch]
  with concurrent.futures.ThreadPoolExecutor() as pool:
    binaries = sum(pool.map(compiled, [sources[i:i + 48] for i in range(0, len(sources), 48)]), [])
  assert binaries and all(b[:4] == b"\x7fELF" for b in binaries)

def one_program(sources: list[str]) -> str:
  """CUDA kernels in one source: every line before a kernel (defines, includes, vector types) once, then each kernel,
  renamed apart."""
  head, kernels = {}, []
  for i, src in enumerate(sources):
    lines = src.splitlines()
    at = next(j for j, line in enumerate(lines) if line.startswith('extern "C"'))
    head |= dict.fromkeys(lines[:at])
    kernels.append(re.sub(r"(__global__ void (?:__launch_bounds__\(\d+\) )?)(\w+)", rf"\g<1>k{i}_\2",
                          "\n".join(lines[at:]), count=1))
  return "\n".join([*head, *kernels])

def render_for_metal(programs: dict[str, tiny.Program]):
  """Every Metal source has one kernel, its ids, and where it reduces in shared memory, threadgroup arrays and
  barriers."""
  for prog in programs.values():
    assert prog.src.count("kernel void ") == 1 and "uint3 gid [[threadgroup_position_in_grid]]" in prog.src, prog.src
    if any(u.op is tiny.Ops.DEFINE_LOCAL for u in prog.uops):  # a shared-memory reduction
      assert re.search(r"^\s*threadgroup .*\[\d+\];$", prog.src, re.M), prog.src
      assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in prog.src, prog.src
