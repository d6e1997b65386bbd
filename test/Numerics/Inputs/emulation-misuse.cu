// Misuses that the CUDA emulation (utils/cuda-emulation) must catch, one
// per case number given as the argument (cuda-emulation-checks.test); case
// 0 is correct use. Launches are written as run_emulated.py rewrites them.
#include "tp_cuda_emulation.h"

#include <cstdio>
#include <cstdlib>

__global__ void scale(float *data, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x)
    data[i] *= 2;
}

/// Every lane ends with the sum of its warp's values.
__global__ void warpSum(const float *in, float *out) {
  float v = in[threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

/// Each lane writes its value, then reads its neighbour's: only correct
/// with the __syncwarp() between (here lane 0 would run first and read
/// memory nobody wrote yet).
__global__ void rotate(const float *in, float *tmp, float *out) {
  unsigned lane = threadIdx.x % 32, base = threadIdx.x - lane;
  tmp[threadIdx.x] = in[threadIdx.x];
  __syncwarp();
  out[threadIdx.x] = tmp[base + (lane + 1) % 32];
}

/// Lanes 0-15 wait for the warp, lanes 16-31 never do.
__global__ void divergentSync(float *out) {
  if (threadIdx.x % 32 < 16)
    __syncwarp();
  out[threadIdx.x] = 1;
}

/// Lanes 0-15 shuffle, lanes 16-31 do not: undefined on a GPU.
__global__ void divergentSum(const float *in, float *out) {
  float v = in[threadIdx.x];
  if (threadIdx.x % 32 < 16)
    v += __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

int main(int argc, char **argv) {
  int which = argc > 1 ? std::atoi(argv[1]) : 0;
  float hostArray[64];
  float *host = hostArray;
  const size_t bytes = sizeof(hostArray);
  for (int i = 0; i < 64; ++i)
    host[i] = float(i);
  float *device = nullptr, *sums = nullptr, *tmp = nullptr;
  cudaStream_t stream, other;
  cudaEvent_t copied;
  if (cudaMalloc(reinterpret_cast<void **>(&device), bytes) ||
      cudaMalloc(reinterpret_cast<void **>(&sums), bytes) ||
      cudaMalloc(reinterpret_cast<void **>(&tmp), bytes) ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) ||
      cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) ||
      cudaEventCreate(&copied))
    return 2;
  int status = 0;
  switch (which) {
  case 0: // correct: copy in, scale, two warps summed, copy out
    status |= cudaMemcpyAsync(device, host, bytes,
                              cudaMemcpyHostToDevice, stream);
    tp_emu::launch(scale, dim3(1), dim3(32), 0, stream, device, 64);
    status |= cudaGetLastError();
    tp_emu::launchWarps(warpSum, dim3(1), dim3(64), 0, stream, device, sums);
    status |= cudaGetLastError();
    status |= cudaMemcpyAsync(host, sums, bytes,
                              cudaMemcpyDeviceToHost, stream);
    std::printf("warp sums %g %g\n", host[0], host[63]);
    tp_emu::launchWarps(rotate, dim3(1), dim3(64), 0, stream, device, tmp,
                        sums);
    status |= cudaGetLastError();
    status |= cudaMemcpyAsync(host, sums, bytes,
                              cudaMemcpyDeviceToHost, stream);
    std::printf("rotated %g %g %g\n", host[0], host[31], host[63]);
    // Across streams: the copy on `stream`, the kernel on `other` after an
    // event; the copy back on `stream` once the host waited for `other`.
    status |= cudaMemcpyAsync(tmp, host, bytes, cudaMemcpyHostToDevice, stream);
    status |= cudaEventRecord(copied, stream);
    status |= cudaStreamWaitEvent(other, copied, 0);
    tp_emu::launch(scale, dim3(1), dim3(32), 0, other, tmp, 64);
    status |= cudaGetLastError();
    status |= cudaStreamSynchronize(other);
    status |= cudaMemcpyAsync(host, tmp, bytes, cudaMemcpyDeviceToHost, stream);
    status |= cudaStreamSynchronize(stream);
    // And after the device was synchronized.
    tp_emu::launch(scale, dim3(1), dim3(32), 0, other, tmp, 64);
    status |= cudaGetLastError();
    status |= cudaDeviceSynchronize();
    status |= cudaFreeAsync(tmp, stream);
    std::printf("across streams %g %g\n", host[1], host[63]);
    break;
  case 1: // the wrong direction: a host-to-device copy from device memory
    status = cudaMemcpyAsync(sums, device, 16, cudaMemcpyHostToDevice, stream);
    break;
  case 2: // a device-to-host copy into device memory
    status = cudaMemcpyAsync(sums, device, 16, cudaMemcpyDeviceToHost, stream);
    break;
  case 3: // 64 bytes into the last 16 of an allocation
    status = cudaMemcpyAsync(device + 60, host, 64, cudaMemcpyHostToDevice,
                             stream);
    break;
  case 4: // a kernel given host memory
    tp_emu::launch(scale, dim3(1), dim3(32), 0, stream, host, 64);
    status = cudaGetLastError();
    break;
  case 5: // a memset of host memory
    status = cudaMemsetAsync(host, 0, bytes, stream);
    break;
  case 6: // lanes of a warp that do not all reach a shuffle
    tp_emu::launchWarps(divergentSum, dim3(1), dim3(32), 0, stream, device,
                        sums);
    break;
  case 7: // lanes of a warp that do not all reach a __syncwarp
    tp_emu::launchWarps(divergentSync, dim3(1), dim3(32), 0, stream, sums);
    break;
  case 8: // a kernel on another stream reads what a copy writes, no event
    status |= cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice,
                              stream);
    tp_emu::launch(scale, dim3(1), dim3(32), 0, other, device, 64);
    status |= cudaGetLastError();
    break;
  case 9: // an event recorded before the copy it should cover
    status |= cudaEventRecord(copied, stream);
    status |= cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice,
                              stream);
    status |= cudaStreamWaitEvent(other, copied, 0);
    status |= cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost,
                              other);
    break;
  case 10: // memory freed on one stream while another's kernel uses it
    tp_emu::launch(scale, dim3(1), dim3(32), 0, other, device, 64);
    status |= cudaFreeAsync(device, stream);
    break;
  }
  std::printf("status %d\n", status);
  return 0;
}
