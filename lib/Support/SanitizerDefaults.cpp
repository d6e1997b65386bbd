//===- SanitizerDefaults.cpp - sanitizer options for TP_SANITIZE builds ---===//
//
// Linked into every executable of a TP_SANITIZE build. The sanitizer
// runtimes read these before ASAN_OPTIONS / UBSAN_OPTIONS, which still win.
//
//===----------------------------------------------------------------------===//

extern "C" {

// allow_user_poisoning=0: LLVM's BumpPtrAllocator (llvm/Support/Allocator.h,
// AllocateSlow and Reset) poisons its slabs when the including code is built
// with ASan (LLVM_ADDRESS_SANITIZER_BUILD, llvm/Support/Compiler.h), and
// unpoisons each allocation in Allocate. Our instrumented code and Debian's
// uninstrumented libMLIR share allocators, such as the context's attribute
// storage: memory poisoned by our copy of AllocateSlow and then handed out by
// libMLIR's copy of Allocate, which never unpoisons, reads as
// use-after-poison. None of our code poisons memory by hand, so nothing of
// ours goes unchecked.
const char *__asan_default_options() { return "allow_user_poisoning=0"; }

const char *__ubsan_default_options() { return "print_stacktrace=1"; }

// libtorch (uninstrumented, loaded only by tp-import-torchscript) leaks the
// zip reader's state when PyTorchStreamReader's constructor throws, as it
// does for a file from a newer PyTorch (docs/notes/torchscript-libtorch.md,
// section 5). libtorch has no frame pointers, so with the fast unwinder the
// stack ends inside it and only a module suppression can name it.
const char *__lsan_default_suppressions() { return "leak:libtorch_cpu.so\n"; }

} // extern "C"
