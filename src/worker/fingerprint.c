/* worker/fingerprint: see fingerprint.h. */
#include "worker/fingerprint.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/ids.h"

static void trim_right(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = 0;
}

static int read_id_file(const char *path, char *out, size_t outlen)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = fgets(out, (int)outlen, f);
    fclose(f);
    if (!line) return -1;
    trim_right(out);
    return out[0] ? 0 : -1;
}

static int machine_id(char *out, size_t outlen)
{
    const char *env = getenv("GPUPOOL_MACHINE_ID");
    if (env && *env) {
        snprintf(out, outlen, "%s", env);
        return 0;
    }
    if (read_id_file("/etc/machine-id", out, outlen) == 0) return 0;
    if (read_id_file("/var/lib/dbus/machine-id", out, outlen) == 0) return 0;
    if (gethostname(out, outlen) == 0) {
        out[outlen - 1] = 0;
        if (out[0]) return 0;
    }
    return -1;
}

int machine_fingerprint(const gpu_info *gpus, int n, char out[65])
{
    char id[256];
    out[0] = 0;
    if (machine_id(id, sizeof id) != 0) return -1;
    buf b = {0};
    int rc = buf_puts(&b, id) | buf_puts(&b, "\n");
    for (int i = 0; gpus && i < n; i++) rc |= buf_puts(&b, gpus[i].uuid) | buf_puts(&b, "\n");
    if (rc != 0) {
        buf_free(&b);
        return -1;
    }
    sha256_hex(b.data, b.len, out);
    buf_free(&b);
    return 0;
}
