"""Metal runtime for tiny: plain ctypes over libobjc, no PyObjC.

Every Objective-C call is objc_msgSend(self, SEL, args...) with the C prototype Apple documents for that selector,
taken from the SELECTORS table. Nothing is loaded until a MetalDevice is made, so the module imports on any OS.
Ownership follows Cocoa: `new*`/`alloc` results are ours (+1) and get `release`d; everything else comes back
autoreleased (+0) and lives until the enclosing autorelease pool drains.
"""
import collections, contextlib, ctypes, functools, math, sys
from ctypes import POINTER, Structure, byref, c_bool, c_char_p, c_double, c_long, c_ulong, c_void_p

NSUInteger, NSInteger = c_ulong, c_long  # 64-bit on every Mac (LP64), on arm64 and x86_64 alike

class CompileError(RuntimeError): pass  # Metal rejected a kernel; tiny raises it again as tiny.CompileError

class MTLSize(Structure):
  _fields_ = [("width", NSUInteger), ("height", NSUInteger), ("depth", NSUInteger)]

# selector -> (restype, argtypes after self and _cmd). Objects (id), classes and SELs are c_void_p. arm64 passes each
# argument by its C type, so a missing or wrong entry here is silent garbage (an NSUInteger sent as a 32-bit int).
SELECTORS: dict[str, tuple] = {
  # NSObject, NSString, NSError
  "new": (c_void_p, []), "retain": (c_void_p, []), "release": (None, []), "respondsToSelector:": (c_bool, [c_void_p]),
  "stringWithUTF8String:": (c_void_p, [c_char_p]), "UTF8String": (c_char_p, []), "localizedDescription": (c_void_p, []),
  # MTLDevice
  "newCommandQueueWithMaxCommandBufferCount:": (c_void_p, [NSUInteger]),
  "newBufferWithLength:options:": (c_void_p, [NSUInteger, NSUInteger]),
  "newLibraryWithSource:options:error:": (c_void_p, [c_void_p, c_void_p, POINTER(c_void_p)]),
  "newComputePipelineStateWithFunction:error:": (c_void_p, [c_void_p, POINTER(c_void_p)]),
  # MTLCompileOptions: the MTLMathMode pair arrived in macOS 15 and replaced fastMathEnabled
  "setMathMode:": (None, [NSInteger]), "setMathFloatingPointFunctions:": (None, [NSInteger]),
  "setFastMathEnabled:": (None, [c_bool]),
  # MTLLibrary, MTLComputePipelineState, MTLBuffer
  "newFunctionWithName:": (c_void_p, [c_void_p]), "maxTotalThreadsPerThreadgroup": (NSUInteger, []),
  "contents": (c_void_p, []),
  # MTLCommandQueue, MTLCommandBuffer
  "commandBuffer": (c_void_p, []), "computeCommandEncoder": (c_void_p, []), "commit": (None, []),
  "waitUntilCompleted": (None, []), "status": (NSUInteger, []), "error": (c_void_p, []),
  "GPUStartTime": (c_double, []), "GPUEndTime": (c_double, []),  # CFTimeInterval: seconds
  # MTLComputeCommandEncoder
  "setComputePipelineState:": (None, [c_void_p]), "endEncoding": (None, []),
  "setBuffer:offset:atIndex:": (None, [c_void_p, NSUInteger, NSUInteger]),
  "dispatchThreadgroups:threadsPerThreadgroup:": (None, [MTLSize, MTLSize]),
}
STORAGE_SHARED = 0            # MTLResourceStorageModeShared: CPU and GPU use the same memory
MATH_SAFE, FP_PRECISE = 0, 1  # MTLMathModeSafe, MTLMathFloatingPointFunctionsPrecise: what fastMathEnabled=NO meant
COMPLETED = 4                 # MTLCommandBufferStatus: 4 completed, 5 error; both are final

# ***** the Objective-C runtime, loaded on first use *****

@functools.cache
def runtime() -> tuple[ctypes.CDLL, ctypes.CDLL]:
  """(libobjc, Metal). Absolute paths: off macOS, find_library("objc") is None and CDLL(None) is the running program."""
  if sys.platform != "darwin": raise RuntimeError(f"Metal needs macOS (with Metal.framework); this is {sys.platform}")
  try:
    objc = ctypes.CDLL("/usr/lib/libobjc.A.dylib")
    # without CoreGraphics loaded, MTLCreateSystemDefaultDevice() returns nil in a command-line process
    ctypes.CDLL("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics")
    metal = ctypes.CDLL("/System/Library/Frameworks/Metal.framework/Metal")
  except OSError as e: raise RuntimeError(f"Metal needs macOS with Metal.framework: {e}") from None
  objc.sel_registerName.restype = objc.objc_getClass.restype = c_void_p
  objc.sel_registerName.argtypes = objc.objc_getClass.argtypes = [c_char_p]
  objc.objc_autoreleasePoolPush.restype = c_void_p
  objc.objc_autoreleasePoolPop.argtypes = [c_void_p]
  metal.MTLCreateSystemDefaultDevice.restype = c_void_p
  return objc, metal

@functools.cache
def messenger(name: str):
  """objc_msgSend typed for one selector."""
  fn = runtime()[0]["objc_msgSend"]  # indexing makes a fresh function object; .objc_msgSend would share one prototype
  fn.restype, argtypes = SELECTORS[name]
  fn.argtypes = [c_void_p, c_void_p, *argtypes]
  return fn

@functools.cache
def selector(name: str) -> int: return runtime()[0].sel_registerName(name.encode())

def send(obj, name: str, *args):
  """[obj name:args...]"""
  return messenger(name)(obj, selector(name), *args)

@functools.cache
def objc_class(name: str) -> int: return runtime()[0].objc_getClass(name.encode())

@contextlib.contextmanager
def autorelease_pool():
  """Frees the +0 objects made inside (command buffers, encoders, strings, errors): no pool, and a loop leaks them."""
  objc = runtime()[0]
  token = objc.objc_autoreleasePoolPush()
  try: yield
  finally: objc.objc_autoreleasePoolPop(token)

def nsstring(text: str) -> int: return send(objc_class("NSString"), "stringWithUTF8String:", text.encode())
def describe(error) -> str: return send(send(error, "localizedDescription"), "UTF8String").decode()

def host(buf, nbytes: int) -> memoryview:
  """The CPU's view of a shared-storage MTLBuffer: memory is unified, so copies in and out are plain memcpys."""
  return memoryview((ctypes.c_char * nbytes).from_address(send(buf, "contents"))).cast("B")

# ***** device: allocator + compiler + queue *****

class MetalDevice:
  compiler_id = "metal-source"
  # Every Mac GPU family allows 1024 threads per threadgroup (Metal feature set tables). The device's own
  # maxThreadsPerThreadgroup returns an MTLSize struct, which x86_64 would need objc_msgSend_stret for. A register-heavy
  # kernel's pipeline may allow fewer: each launch checks its own maxTotalThreadsPerThreadgroup.
  local_max = 1024
  def __init__(self):
    self.device = runtime()[1].MTLCreateSystemDefaultDevice()
    if not self.device: raise RuntimeError("Metal found no GPU: MTLCreateSystemDefaultDevice() returned nil")
    # lets the CPU run up to 1024 launches ahead of the GPU before commandBuffer blocks (the default queue allows 64)
    self.queue = send(self.device, "newCommandQueueWithMaxCommandBufferCount:", 1024)
    self.in_flight: collections.deque = collections.deque()  # (kernel name, retained command buffer), oldest first
  def compile(self, src: str) -> bytes:
    # The documented API compiles source inside newLibraryWithSource: at load; there is no public source -> binary
    # call in the runtime, so the "binary" tiny caches is the source itself.
    return src.encode()
  def load(self, name: str, binary: bytes) -> "MetalProgram":
    src = binary.decode()
    with autorelease_pool():
      opts = send(objc_class("MTLCompileOptions"), "new")
      # fast math is the default and assumes no inf/NaN: -INFINITY accumulators and NaN propagation would break
      if send(opts, "respondsToSelector:", selector("setMathMode:")):
        send(opts, "setMathMode:", MATH_SAFE)
        send(opts, "setMathFloatingPointFunctions:", FP_PRECISE)
      else: send(opts, "setFastMathEnabled:", False)
      err = c_void_p()
      lib = send(self.device, "newLibraryWithSource:options:error:", nsstring(src), opts, byref(err))
      send(opts, "release")
      if not lib: raise CompileError(f"Metal failed to compile this kernel:\n{describe(err)}\n{src}")
      fn = send(lib, "newFunctionWithName:", nsstring(name))
      send(lib, "release")
      if not fn: raise CompileError(f"the Metal source has no kernel named {name!r}:\n{src}")
      pipeline = send(self.device, "newComputePipelineStateWithFunction:error:", fn, byref(err))
      send(fn, "release")
      if not pipeline: raise CompileError(f"Metal failed to make a pipeline for {name}:\n{describe(err)}\n{src}")
    return MetalProgram(self, name, pipeline, send(pipeline, "maxTotalThreadsPerThreadgroup"))
  def alloc(self, nbytes: int) -> int:
    buf = send(self.device, "newBufferWithLength:options:", nbytes, STORAGE_SHARED)
    if not buf: raise MemoryError(f"Metal could not allocate a buffer of {nbytes} bytes")
    return buf
  # safe while kernels still use it: a command buffer retains the buffers it binds until it completes
  def free(self, buf) -> None: send(buf, "release")
  def copyin(self, buf, src: memoryview) -> None:
    self.synchronize()  # a queued kernel may still read this memory
    host(buf, src.nbytes)[:] = src.cast("B")
  def copyout(self, dst: memoryview, buf) -> None:
    self.synchronize()  # the kernels writing it must be done
    dst.cast("B")[:] = host(buf, dst.nbytes)
  def finish(self, name: str, cbuf) -> float:
    """Waits for one command buffer and releases it. Returns its GPU seconds; raises the error the GPU reported."""
    with autorelease_pool():
      send(cbuf, "waitUntilCompleted")
      err = send(cbuf, "error")
      why = describe(err) if err else None
      seconds = send(cbuf, "GPUEndTime") - send(cbuf, "GPUStartTime")
    send(cbuf, "release")
    if why: raise RuntimeError(f"Metal kernel {name} failed on the GPU: {why}")
    return seconds
  def synchronize(self) -> None:
    while self.in_flight: self.finish(*self.in_flight.popleft())
  def run(self, name: str, kernels: list, wait: bool) -> float | None:
    """Encodes kernels (each a program, its buffers and its sizes) into one command buffer, in order, and commits it:
    a compute encoder's dispatches run one after another, each seeing what the one before wrote."""
    for prog, _, _, local_size in kernels:  # checked first: an encoder must end once begun
      if (threads := math.prod(local_size)) > prog.max_threads:
        raise RuntimeError(f"kernel {prog.name}: local size {tuple(local_size)} is {threads} threads per threadgroup, "
                           f"but its Metal pipeline allows at most {prog.max_threads}")
    # release what already finished, so launches without a synchronize() hold only the buffers still running
    while self.in_flight and send(self.in_flight[0][1], "status") >= COMPLETED: self.finish(*self.in_flight.popleft())
    with autorelease_pool():
      cbuf = send(self.queue, "commandBuffer")
      enc = send(cbuf, "computeCommandEncoder")
      for prog, bufs, global_size, local_size in kernels:
        send(enc, "setComputePipelineState:", prog.pipeline)
        for i, buf in enumerate(bufs): send(enc, "setBuffer:offset:atIndex:", buf, 0, i)
        send(enc, "dispatchThreadgroups:threadsPerThreadgroup:", MTLSize(*global_size), MTLSize(*local_size))
      send(enc, "endEncoding")
      send(cbuf, "commit")
      cbuf = send(cbuf, "retain")  # the pool would free it before finish() reads its status, error and times
    if wait: return self.finish(name, cbuf)
    self.in_flight.append((name, cbuf))
    return None
  def graph(self, kernels: list):
    """Kernels (each with the slots of its buffers and its sizes) as one command buffer a call, bound by slot."""
    name = f"a replay of {', '.join(p.name for p, *_ in kernels)}"
    return lambda bufs: self.run(name, [(p, [bufs[s] for s in slots], g, l) for p, slots, g, l in kernels], False)

# ***** program: one compute pipeline *****

class MetalProgram:
  def __init__(self, dev: MetalDevice, name: str, pipeline: int, max_threads: int):
    self.dev, self.name, self.pipeline, self.max_threads = dev, name, pipeline, max_threads
  def __del__(self): send(self.pipeline, "release")
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), wait=False) -> float | None:
    """global_size counts threadgroups, local_size threads in each. wait=True returns the kernel's GPU seconds."""
    return self.dev.run(self.name, [(self, bufs, global_size, local_size)], wait)
