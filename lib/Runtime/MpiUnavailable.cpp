//===- MpiUnavailable.cpp - the MPI entry points without MPI --------------===//
//
// Built instead of MpiCommunicator.cpp when CMake found no MPI, so that
// callers link either way and find out at run time.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Communicators.h"

using namespace tp::rt;

bool tp::rt::haveMpi() { return false; }

std::unique_ptr<RankContext>
tp::rt::createMpiRankContext(std::chrono::milliseconds) {
  throw Error("this runtime was built without MPI; rebuild with MPI "
              "installed (TP_ENABLE_MPI=ON) or use threads");
}
