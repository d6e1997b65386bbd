// Linked into sanitized executables: built-in options/suppressions (env vars
// still win).
extern "C" {
const char *__asan_default_options() { return "allow_user_poisoning=0"; }
const char *__ubsan_default_options() { return "print_stacktrace=1"; }
// libtorch 1.13 bug: PyTorchStreamReader's ctor throws from init() (bad/too-new
// "version" record) after mz_zip_reader_init, so the miniz state is never
// freed. Matching needs fast_unwind_on_malloc=0 (libtorch has no frame
// pointers; the fast unwinder stops there).
const char *__lsan_default_suppressions() {
  return "leak:mz_zip_reader_init\n";
}
const char *__lsan_default_options() { return "fast_unwind_on_malloc=0"; }
}
