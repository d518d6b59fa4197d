/* worker/fingerprint: a stable identity for this machine and its GPUs, so the
 * server recognises a worker that restarts (same machine, same GPUs) and
 * notices when its GPUs were swapped.  Owns where the machine id comes from:
 * GPUPOOL_MACHINE_ID (lets tests run several "machines" on one host), else
 * /etc/machine-id, else /var/lib/dbus/machine-id, else the hostname. */
#ifndef GPUPOOL_FINGERPRINT_H
#define GPUPOOL_FINGERPRINT_H

#include "worker/gpu.h"

/* Writes the lower-case hex SHA-256 of machine id + "\n" + each GPU uuid +
 * "\n" (in the order given) into out.  Returns 0, or -1 if no machine id
 * could be found at all. */
int machine_fingerprint(const gpu_info *gpus, int n, char out[65]);

#endif
