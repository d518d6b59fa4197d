/* worker/idle: how long since someone at this machine used its keyboard,
 * mouse or touchpad, without an X server or a desktop session.
 *
 * Owns the input devices: it opens /dev/input/event* read-only (which needs
 * root or the `input` group), keeps only the devices with letter keys, a
 * pointer or a touch surface, and reads the events the kernel queues for it,
 * keeping nothing but the newest one's time (the kernel stamps it on the
 * monotonic clock).  Every reader gets its own copy of the events, so the
 * desktop loses nothing.  New devices are picked up as they appear.  Before
 * any event has been seen, the last input counts as the moment the source was
 * opened, so a worker that just started waits the full pause.
 *
 * Not seen: typing over SSH or a remote desktop, a device another program
 * grabs exclusively, and input inside a VM.  A fake file holding the
 * seconds since input replaces the devices for tests. */
#ifndef GPUPOOL_IDLE_H
#define GPUPOOL_IDLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct idle_source idle_source;

/* fake_file: read at every idle_read instead of the devices; NULL for the
 * devices.  now is monotonic ms. */
idle_source *idle_open(const char *fake_file, int64_t now);
void idle_close(idle_source *s);
/* Seconds since the last input, or -1 when it cannot be told (why says so:
 * no readable input device, an unreadable fake file). */
int64_t idle_read(idle_source *s, int64_t now, char *why, size_t whylen);

#endif
