/* A shared library that is not what tp-run expects of a model library:
 * built with -DNO_QUERY it exports no tp_model_query; with -DOTHER_VERSION
 * it speaks only a later version of the ABI; with -DWRONG_TARGET it says
 * it is a --target cuda library. tampered-artifact.test puts each inside
 * an artifact in place of libmodel.so. */
#include <stddef.h>
#include <stdint.h>

#include "tp_model_abi.h"

#ifndef NO_QUERY
static const char *signature(void) { return ""; }
static int deviceCount(void) { return 0; }

const tp_model_api *tp_model_query(uint32_t abi_version) {
  static tp_model_api api;
  api.abi_version = abi_version;
  api.target = "cuda";
  api.signature = signature;
  api.device_count = deviceCount;
#ifdef OTHER_VERSION
  if (abi_version != TP_MODEL_ABI_VERSION + 1)
    return NULL;
#endif
  return &api;
}
#endif

int tp_not_a_model = 1;
