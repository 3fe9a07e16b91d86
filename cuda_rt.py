# cuda_rt.py: tiny's CUDA runtime, in ctypes and the standard library. NVRTC turns CUDA C++ into a CUBIN (or PTX) with
# no GPU and no driver present; the driver API (libcuda) loads it and launches it. Both libraries load on first use,
# so importing this file never fails on a machine without CUDA. It imports nothing from tiny, which imports it from
# beside itself (its own package, if it is in one).
import ctypes, glob, os, site
from ctypes import POINTER as P, byref, c_char, c_char_p, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p

NEED_GPU = "DEVICE=CUDA needs an NVIDIA GPU and driver"

class CUDAError(RuntimeError): pass     # a driver or NVRTC call failed
class CompileError(RuntimeError): pass  # NVRTC rejected a kernel; tiny raises it again as tiny.CompileError

# ***** library loading: the file an env var names, else the usual names in a CUDA toolkit and NVIDIA's pip wheels *****

LIBS = {  # library -> (env var naming its file, usual file names, who needs it, companion to preload from its folder)
  "libcuda": ("TINY_LIBCUDA", ("libcuda.so.1", "libcuda.so"), NEED_GPU, ""),
  # some NVRTC wheels lack the rpath that finds libnvrtc-builtins, so it is loaded first, into the global namespace
  "libnvrtc": ("TINY_LIBNVRTC", ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"),
               "compiling CUDA kernels needs NVRTC (pip install nvidia-cuda-nvrtc)", "libnvrtc-builtins.so*"),
}

def _toolkits() -> list[str]: return [p for p in (os.environ.get("CUDA_PATH"), "/usr/local/cuda") if p]

def _wheels(sub: str) -> list[str]:
  # cu13 wheels all unpack into nvidia/cu13; cu12 wheels have one folder per package
  sites = dict.fromkeys([*site.getsitepackages(), site.getusersitepackages()])
  return [os.path.join(s, "nvidia", pkg, sub) for s in sites for pkg in ("cu13", "cuda_nvrtc", "cuda_runtime")]

def _dlopen(path: str, companion: str) -> ctypes.CDLL:
  folder = os.path.dirname(path)  # empty for a bare name, whose companions dlopen finds by itself
  for dep in sorted(glob.glob(os.path.join(folder, companion))) if folder and companion else []:
    ctypes.CDLL(dep, mode=ctypes.RTLD_GLOBAL)
  return ctypes.CDLL(path)

def _open(name: str) -> ctypes.CDLL:
  env, files, need, companion = LIBS[name]
  dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d] + [f"{t}/lib64" for t in _toolkits()]
  dirs += ["/usr/local/cuda/targets/x86_64-linux/lib", *_wheels("lib")]
  if override := os.environ.get(env): paths, tried = [override], override
  else:  # a bare file name lets dlopen search the system's library path (ldconfig), where the driver lives
    paths = [os.path.join(d, f) for d in dirs for f in files if os.path.exists(os.path.join(d, f))] + list(files)
    tried = f"{', '.join(files)} in {', '.join(dirs)} and on the system library path"
  broken = []  # files that exist but would not load, with the loader's reason
  for path in paths:
    try: return _dlopen(path, companion)
    except OSError as e:
      if os.path.exists(path): broken.append(str(e))
  raise RuntimeError(f"{need}: no loadable {name} was found (tried {tried}){''.join('; ' + b for b in broken)}; "
                     f"set {env} to the library's path")

# ***** error checking: a call that returns a Status raises CUDAError naming the call, the status and its meaning *****

class Status(c_int): pass  # a CUresult or nvrtcResult; 0 is success

API = {  # library -> function -> (restype, *argtypes) as in the C prototypes; CUdeviceptr is c_uint64, handles c_void_p
  "libcuda": {
    "cuInit": (Status, c_uint), "cuDeviceGet": (Status, P(c_int), c_int),
    "cuDeviceGetAttribute": (Status, P(c_int), c_int, c_int),
    # the primary context is the one every library in the process shares; cuCtxCreate changed signature in CUDA 13
    "cuDevicePrimaryCtxRetain": (Status, P(c_void_p), c_int), "cuCtxSetCurrent": (Status, c_void_p),
    "cuCtxSynchronize": (Status,),
    "cuMemAlloc_v2": (Status, P(c_uint64), c_size_t), "cuMemFree_v2": (Status, c_uint64),
    "cuMemcpyHtoD_v2": (Status, c_uint64, c_void_p, c_size_t),
    "cuMemcpyDtoH_v2": (Status, c_void_p, c_uint64, c_size_t),
    "cuModuleLoadData": (Status, P(c_void_p), c_char_p),
    "cuModuleGetFunction": (Status, P(c_void_p), c_void_p, c_char_p),
    "cuLaunchKernel": (Status, c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                       P(c_void_p), P(c_void_p)),
    "cuEventCreate": (Status, P(c_void_p), c_uint), "cuEventRecord": (Status, c_void_p, c_void_p),
    "cuEventSynchronize": (Status, c_void_p), "cuEventDestroy_v2": (Status, c_void_p),
    "cuEventElapsedTime": (Status, P(c_float), c_void_p, c_void_p),
    # these two describe a status: they return a plain int and stay unchecked, as checking them could recurse
    "cuGetErrorName": (c_int, c_int, P(c_char_p)), "cuGetErrorString": (c_int, c_int, P(c_char_p))},
  "libnvrtc": {
    "nvrtcVersion": (Status, P(c_int), P(c_int)),
    "nvrtcCreateProgram": (Status, P(c_void_p), c_char_p, c_char_p, c_int, P(c_char_p), P(c_char_p)),
    "nvrtcCompileProgram": (Status, c_void_p, c_int, P(c_char_p)), "nvrtcDestroyProgram": (Status, P(c_void_p)),
    "nvrtcGetProgramLogSize": (Status, c_void_p, P(c_size_t)), "nvrtcGetProgramLog": (Status, c_void_p, c_char_p),
    "nvrtcGetCUBINSize": (Status, c_void_p, P(c_size_t)), "nvrtcGetCUBIN": (Status, c_void_p, c_char_p),
    "nvrtcGetPTXSize": (Status, c_void_p, P(c_size_t)), "nvrtcGetPTX": (Status, c_void_p, c_char_p),
    "nvrtcGetErrorString": (c_char_p, c_int)},  # the enum's own name, e.g. "NVRTC_ERROR_COMPILATION"
}

# graphs of kernel nodes, with CUDA 12's _v2 parameter struct (the first one and two more fields, left NULL): a driver
# without them launches a replay's kernels one by one
GRAPHS = {
  "cuGraphCreate": (Status, P(c_void_p), c_uint),
  "cuGraphAddKernelNode_v2": (Status, P(c_void_p), c_void_p, P(c_void_p), c_size_t, c_void_p),
  "cuGraphInstantiateWithFlags": (Status, P(c_void_p), c_void_p, c_uint64),
  "cuGraphExecKernelNodeSetParams_v2": (Status, c_void_p, c_void_p, c_void_p),
  "cuGraphLaunch": (Status, c_void_p, c_void_p),
  "cuGraphExecDestroy": (Status, c_void_p), "cuGraphDestroy": (Status, c_void_p)}
API["libcuda"] |= GRAPHS

def _describe_cuda(cu: ctypes.CDLL, status: int) -> str:
  name, text = c_char_p(), c_char_p()
  cu.cuGetErrorName(status, byref(name))
  cu.cuGetErrorString(status, byref(text))
  return f"{(name.value or b'CUresult %d' % status).decode()} ({(text.value or b'unknown error').decode()})"

DESCRIBE = {"libcuda": _describe_cuda, "libnvrtc": lambda nv, status: nv.nvrtcGetErrorString(status).decode()}

_loaded: dict[str, ctypes.CDLL] = {}

def _lib(name: str) -> ctypes.CDLL:
  if name in _loaded: return _loaded[name]
  lib = _open(name)
  def check(status: Status, func, args):
    if status.value != 0: raise CUDAError(f"{func.__name__} failed with {DESCRIBE[name](lib, status.value)}")
  # CUDA 12.8 added cuEventElapsedTime_v2 and cuda.h 13 maps the plain name to it; older drivers have only the plain one
  if hasattr(lib, "cuEventElapsedTime_v2"): lib.cuEventElapsedTime = lib.cuEventElapsedTime_v2
  for fname, (restype, *argtypes) in API[name].items():
    if fname in GRAPHS and not hasattr(lib, fname): continue
    fn = getattr(lib, fname)
    fn.restype, fn.argtypes = restype, argtypes
    if restype is Status: fn.errcheck = check
  _loaded[name] = lib
  return lib

# ***** NVRTC: source -> CUBIN for one sm_XX (a driver of the same CUDA major loads it with no JIT), or PTX *****

def nvrtc_version() -> tuple[int, int]:
  major, minor = c_int(), c_int()
  _lib("libnvrtc").nvrtcVersion(byref(major), byref(minor))
  return major.value, minor.value

def _output(nv: ctypes.CDLL, prog: c_void_p, what: str) -> bytes:  # what: "ProgramLog", "PTX" or "CUBIN"
  size = c_size_t()
  getattr(nv, f"nvrtcGet{what}Size")(prog, byref(size))
  buf = ctypes.create_string_buffer(size.value)
  getattr(nv, f"nvrtcGet{what}")(prog, buf)
  # the log and PTX are text whose size counts a terminating NUL; a CUBIN is binary and kept whole
  return buf.raw if what == "CUBIN" else buf.raw.rstrip(b"\0")

def nvrtc_compile(src: str, arch: str, ptx: bool = False, opts: tuple[str, ...] = (), log: list | None = None) -> bytes:
  """A CUBIN for `arch` ("sm_90"), or PTX for its virtual architecture ("compute_90"); `opts` are extra NVRTC flags
  (`--ptxas-options=-v`: registers and spills), and `log`, if given, gets NVRTC's log."""
  dirs = list(dict.fromkeys([f"{t}/include" for t in _toolkits()] + _wheels("include")))
  fp16 = [d for d in dirs if os.path.exists(os.path.join(d, "cuda_fp16.h"))]  # (cuda_bf16.h is beside it)
  if ("cuda_fp16.h" in src or "cuda_bf16.h" in src) and not fp16:
    raise RuntimeError(f"16-bit float CUDA kernels need cuda_fp16.h and cuda_bf16.h, which are in none of "
                       f"{', '.join(dirs)}; pip install nvidia-cuda-runtime, or set CUDA_PATH to a CUDA toolkit")
  nv, prog = _lib("libnvrtc"), c_void_p()
  args = [f"--gpu-architecture={arch.replace('sm_', 'compute_') if ptx else arch}", *(f"-I{d}" for d in fp16), *opts]
  nv.nvrtcCreateProgram(byref(prog), src.encode(), b"kernel.cu", 0, None, None)
  try:
    try: nv.nvrtcCompileProgram(prog, len(args), (c_char_p * len(args))(*[a.encode() for a in args]))
    except CUDAError as e:
      lines = "\n".join(f"{i:4} {line}" for i, line in enumerate(src.splitlines(), 1))
      raise CompileError(f"{e}\n{_output(nv, prog, 'ProgramLog').decode().strip()}\n{lines}") from None
    if log is not None: log.append(_output(nv, prog, "ProgramLog").decode())
    return _output(nv, prog, "PTX" if ptx else "CUBIN")
  finally: nv.nvrtcDestroyProgram(byref(prog))

# ***** driver: device 0, its memory, and kernel launches *****

class CUDADevice:
  def __init__(self):
    cu = self.cu = _lib("libcuda")
    try: cu.cuInit(0)
    except CUDAError as e: raise RuntimeError(f"{NEED_GPU}: {e}") from None
    self.dev, self.ctx = c_int(), c_void_p()
    cu.cuDeviceGet(byref(self.dev), 0)
    cu.cuDevicePrimaryCtxRetain(byref(self.ctx), self.dev)
    self.use()
    self.arch = f"sm_{self.attribute(75)}{self.attribute(76)}"  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
    self.local_max = self.attribute(1)   # CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
    # PTX leaves the last compile step to the driver's JIT, which rejects PTX from an NVRTC newer than the driver
    self.ptx = os.environ.get("CUDA_PTX") == "1"
    self.compiler_id = f"nvrtc-{'.'.join(map(str, nvrtc_version()))}-{self.arch}-{'ptx' if self.ptx else 'cubin'}"
  def use(self) -> ctypes.CDLL:
    """The driver, with the context made current on the calling thread. A context is current per thread, and tiny calls
    the driver from several (the one that realizes, the workers that compile new kernels, a freed buffer's last owner),
    where another library may have made its own current: it is set each time (a cheap call: thread-local state)."""
    self.cu.cuCtxSetCurrent(self.ctx)
    return self.cu
  def attribute(self, attr: int) -> int:
    value = c_int()
    self.cu.cuDeviceGetAttribute(byref(value), attr, self.dev)
    return value.value
  def compile(self, src: str) -> bytes: return nvrtc_compile(src, self.arch, self.ptx)
  def load(self, name: str, binary: bytes) -> "CUDAProgram": return CUDAProgram(self, name, binary)
  def graph(self, kernels: list) -> "CUDAGraph | None":
    return CUDAGraph(self, kernels) if all(hasattr(self.cu, f) for f in GRAPHS) else None
  def alloc(self, nbytes: int) -> int:
    ptr = c_uint64()
    self.use().cuMemAlloc_v2(byref(ptr), nbytes)
    return ptr.value
  def free(self, ptr: int) -> None: self.use().cuMemFree_v2(ptr)
  def copyin(self, ptr: int, src: memoryview) -> None: self.use().cuMemcpyHtoD_v2(ptr, _host(src), src.nbytes)
  def copyout(self, dst: memoryview, ptr: int) -> None: self.use().cuMemcpyDtoH_v2(_host(dst), ptr, dst.nbytes)
  def synchronize(self) -> None: self.use().cuCtxSynchronize()

def _host(mv: memoryview) -> ctypes.Array:
  # ctypes maps a writable buffer in place; a read-only one (bytes) it can only copy
  return (c_char * mv.nbytes).from_buffer_copy(mv) if mv.readonly else (c_char * mv.nbytes).from_buffer(mv)

def arguments(n: int) -> tuple[ctypes.Array, ctypes.Array]:
  """n argument values (device pointers), and kernelParams: a pointer to each, as launches and graph nodes take them."""
  values = (c_uint64 * n)()
  return values, (c_void_p * n)(*[ctypes.addressof(values) + 8 * i for i in range(n)])

class CUDAProgram:
  def __init__(self, dev: CUDADevice, name: str, binary: bytes):
    self.dev, self.cu, self.module, self.func = dev, dev.cu, c_void_p(), c_void_p()
    # a PTX image must end in NUL, and every bytes object has one just past its end
    dev.use().cuModuleLoadData(byref(self.module), binary)
    self.cu.cuModuleGetFunction(byref(self.func), self.module, name.encode())  # the name is unmangled by extern "C"
    self.args, self.params = arguments(0)
  def __call__(self, *bufs: int, global_size=(1, 1, 1), local_size=(1, 1, 1), wait=False) -> float | None:
    if len(self.args) != len(bufs): self.args, self.params = arguments(len(bufs))  # later launches only set values
    self.args[:] = bufs
    self.dev.use()
    if wait:  # timed by events around the launch
      start, end = c_void_p(), c_void_p()
      for ev in (start, end): self.cu.cuEventCreate(byref(ev), 0)
      self.cu.cuEventRecord(start, None)  # None is the default stream, where every launch and copy here goes
    self.cu.cuLaunchKernel(self.func, *global_size, *local_size, 0, None, self.params, None)
    if not wait: return None
    self.cu.cuEventRecord(end, None)
    self.cu.cuEventSynchronize(end)
    ms = c_float()
    self.cu.cuEventElapsedTime(byref(ms), start, end)
    for ev in (start, end): self.cu.cuEventDestroy_v2(ev)
    return ms.value * 1e-3

class KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
  _fields_ = [("func", c_void_p), *[(f"{kind}Dim{axis}", c_uint) for kind in ("grid", "block") for axis in "XYZ"],
              ("sharedMemBytes", c_uint), ("kernelParams", P(c_void_p)), ("extra", P(c_void_p)),
              ("kern", c_void_p), ("ctx", c_void_p)]

class Node:  # a kernel node of a graph: its parameters, the argument values they point at, and their buffers' slots
  def __init__(self, prog: CUDAProgram, slots: list[int], global_size, local_size):
    self.handle, self.slots, self.bound = c_void_p(), slots, None
    self.args, pointers = arguments(len(slots))
    self.params = KernelNodeParams(prog.func, *global_size, *local_size, 0, pointers)

class CUDAGraph:
  """Kernels (each with the slots of its buffers and its sizes) as one CUDA graph, a chain of kernel nodes, each run
  after the one before. A call binds buffers by slot, sets the parameters of each node whose buffers changed since
  the last call (the driver copies them), and launches the whole graph once."""
  def __init__(self, dev: CUDADevice, kernels: list):
    self.dev, self.graph, self.exec = dev, c_void_p(), c_void_p()
    self.nodes = [Node(*kernel) for kernel in kernels]
    dev.use()
    dev.cu.cuGraphCreate(byref(self.graph), 0)
    for before, node in zip([None, *self.nodes], self.nodes):
      after = (c_void_p * 1)(before.handle.value) if before else None
      dev.cu.cuGraphAddKernelNode_v2(byref(node.handle), self.graph, after, int(before is not None),
                                     byref(node.params))
    dev.cu.cuGraphInstantiateWithFlags(byref(self.exec), self.graph, 0)
  def __call__(self, bufs: list[int]) -> None:
    self.dev.use()
    for node in self.nodes:
      if node.bound != (ptrs := tuple(bufs[s] for s in node.slots)):  # (the pointers it was last set to)
        node.args[:], node.bound = ptrs, ptrs
        self.dev.cu.cuGraphExecKernelNodeSetParams_v2(self.exec, node.handle, byref(node.params))
    self.dev.cu.cuGraphLaunch(self.exec, None)
  def __del__(self):
    if self.exec: self.dev.cu.cuGraphExecDestroy(self.exec)
    if self.graph: self.dev.cu.cuGraphDestroy(self.graph)
