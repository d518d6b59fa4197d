/* worker/idle: see idle.h. */
#include "worker/idle.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/input.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "util/opts.h"

#define IDLE_MAX_DEVS 32
#define RESCAN_MS 5000
#define NBITS(x) ((((x) - 1) / (8 * sizeof(unsigned long))) + 1)

typedef struct input_dev {
    char name[32];     /* eventN */
    int fd;            /* -1: looked at, not a keyboard or pointer */
    int stamps_mono;   /* the kernel stamps its events on CLOCK_MONOTONIC */
} input_dev;

struct idle_source {
    char fake[1024];
    input_dev devs[IDLE_MAX_DEVS];
    int ndevs;
    int denied;        /* devices we may not open, at the last scan */
    int have_dir;
    int64_t last_input_ms, last_scan_ms;
};

idle_source *idle_open(const char *fake_file, int64_t now)
{
    idle_source *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (fake_file) snprintf(s->fake, sizeof s->fake, "%s", fake_file);
    s->last_input_ms = now;
    s->last_scan_ms = -RESCAN_MS;
    return s;
}

void idle_close(idle_source *s)
{
    if (!s) return;
    for (int i = 0; i < s->ndevs; i++)
        if (s->devs[i].fd >= 0) close(s->devs[i].fd);
    free(s);
}

static int bit(const unsigned long *bits, int n)
{
    return (int)((bits[n / (8 * sizeof(unsigned long))] >> (n % (8 * sizeof(unsigned long)))) & 1UL);
}

/* Letter keys, a relative pointer, or a touch surface: what a person uses.
 * Power buttons, lid switches and accelerometers send events too, and must
 * not count as someone at the machine. */
static int is_human_input(int fd)
{
    unsigned long ev[NBITS(EV_MAX + 1)] = {0}, keys[NBITS(KEY_MAX + 1)] = {0}, rel[NBITS(REL_MAX + 1)] = {0};
    if (ioctl(fd, EVIOCGBIT(0, sizeof ev), ev) < 0) return 0;
    if (bit(ev, EV_KEY)) ioctl(fd, EVIOCGBIT(EV_KEY, sizeof keys), keys);
    if (bit(ev, EV_REL)) ioctl(fd, EVIOCGBIT(EV_REL, sizeof rel), rel);
    int keyboard = bit(ev, EV_KEY) && bit(keys, KEY_A) && bit(keys, KEY_Z);
    int pointer = bit(ev, EV_REL) && bit(rel, REL_X) && bit(rel, REL_Y);
    int touch = bit(ev, EV_ABS) && bit(ev, EV_KEY) && (bit(keys, BTN_TOUCH) || bit(keys, BTN_TOOL_FINGER));
    return keyboard || pointer || touch;
}

static int known(const idle_source *s, const char *name)
{
    for (int i = 0; i < s->ndevs; i++)
        if (!strcmp(s->devs[i].name, name)) return 1;
    return 0;
}

static void scan(idle_source *s)
{
    DIR *d = opendir("/dev/input");
    s->have_dir = d != NULL;
    s->denied = 0;
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "event", 5) || strlen(e->d_name) >= sizeof s->devs[0].name) continue;
        if (known(s, e->d_name)) continue;
        char path[64];
        snprintf(path, sizeof path, "/dev/input/%.31s", e->d_name);
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            if (errno == EACCES || errno == EPERM) s->denied++;
            continue;
        }
        if (s->ndevs >= IDLE_MAX_DEVS) { close(fd); break; }
        input_dev *dev = &s->devs[s->ndevs++];
        snprintf(dev->name, sizeof dev->name, "%.31s", e->d_name);
        dev->fd = fd;
        if (!is_human_input(fd)) {
            close(fd);
            dev->fd = -1;
            continue;
        }
        int clk = CLOCK_MONOTONIC;
        dev->stamps_mono = ioctl(fd, EVIOCSCLOCKID, &clk) == 0;
    }
    closedir(d);
}

/* Takes every queued event; returns the newest input's monotonic time, or
 * -1 when none came.  A device that went away is dropped. */
static int64_t drain(input_dev *dev, int64_t now)
{
    int64_t newest = -1;
    struct input_event evs[64];
    for (;;) {
        ssize_t r = read(dev->fd, evs, sizeof evs);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                close(dev->fd);
                dev->fd = -1;
                dev->name[0] = 0; /* seen again if it comes back */
            }
            break;
        }
        for (size_t i = 0; i < (size_t)r / sizeof evs[0]; i++) {
            if (evs[i].type != EV_KEY && evs[i].type != EV_REL && evs[i].type != EV_ABS) continue;
            int64_t t = dev->stamps_mono
                            ? (int64_t)evs[i].input_event_sec * 1000 + (int64_t)evs[i].input_event_usec / 1000
                            : now;
            if (t > now) t = now;
            if (t > newest) newest = t;
        }
    }
    return newest;
}

static int64_t read_fake(const idle_source *s, char *why, size_t whylen)
{
    char *text = read_small_file(s->fake, 64);
    if (!text) {
        snprintf(why, whylen, "cannot read %s", s->fake);
        return -1;
    }
    char *end;
    double v = strtod(text, &end);
    int ok = end != text && !*end && isfinite(v) && v >= 0;
    free(text);
    if (!ok) {
        snprintf(why, whylen, "%s does not hold a number of seconds", s->fake);
        return -1;
    }
    return (int64_t)v;
}

int64_t idle_read(idle_source *s, int64_t now, char *why, size_t whylen)
{
    if (why && whylen) why[0] = 0;
    if (!s) return -1;
    if (s->fake[0]) return read_fake(s, why, whylen);
    if (now - s->last_scan_ms >= RESCAN_MS) {
        scan(s);
        s->last_scan_ms = now;
    }
    int open = 0;
    for (int i = 0; i < s->ndevs; i++) {
        if (s->devs[i].fd < 0) continue;
        int64_t t = drain(&s->devs[i], now);
        if (t > s->last_input_ms) s->last_input_ms = t;
        open += s->devs[i].fd >= 0;
    }
    /* Forget devices that went away so the table does not fill up. */
    int k = 0;
    for (int i = 0; i < s->ndevs; i++)
        if (s->devs[i].name[0]) s->devs[k++] = s->devs[i];
    s->ndevs = k;
    if (!s->have_dir) {
        snprintf(why, whylen, "this machine has no /dev/input");
        return -1;
    }
    if (!open && s->denied) {
        snprintf(why, whylen, "/dev/input/event* may not be read (the worker's user needs the input group)");
        return -1;
    }
    return (now - s->last_input_ms) / 1000;
}
