// Emulation for tests: see tp_cuda_emulation.h.
#include "tp_cuda_emulation.h"
