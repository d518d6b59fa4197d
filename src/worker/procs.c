/* worker/procs: see procs.h. */
#include "worker/procs.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util/opts.h"

int procs_parse_ppid(const char *stat)
{
    /* The command name is in parentheses and may itself hold spaces and
     * parentheses, so the fields after it start at the last ')'. */
    const char *close = stat ? strrchr(stat, ')') : NULL;
    if (!close) return -1;
    char state;
    int ppid;
    if (sscanf(close + 1, " %c %d", &state, &ppid) != 2 || ppid < 0) return -1;
    return ppid;
}

static int read_ppid(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    char *text = read_small_file(path, 1024);
    int ppid = text ? procs_parse_ppid(text) : -1;
    free(text);
    return ppid;
}

static int in_list(int pid, const int *roots, int nroots)
{
    for (int i = 0; i < nroots; i++)
        if (roots[i] == pid) return 1;
    return 0;
}

int procs_descends_from(int pid, const int *roots, int nroots)
{
    /* Deep enough for any engine's process tree; a bound because a pid can
     * be reused while we walk. */
    for (int depth = 0; pid > 1 && depth < 32; depth++) {
        if (in_list(pid, roots, nroots)) return 1;
        pid = read_ppid(pid);
    }
    return 0;
}

int procs_parse_listen(const char *text, int port, unsigned long *inodes, int max)
{
    int n = 0;
    const char *p = text ? text : "";
    while (*p && n < max) {
        const char *nl = strchr(p, '\n');
        char line[512];
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len < sizeof line) {
            memcpy(line, p, len);
            line[len] = 0;
            unsigned int lport, st;
            unsigned long inode;
            /* sl: local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*d: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*s %*s %*s %*u %*u %lu", &lport, &st,
                       &inode) == 3 &&
                st == 0x0A /* LISTEN */ && (int)lport == port && inode)
                inodes[n++] = inode;
        }
        if (!nl) break;
        p = nl + 1;
    }
    return n;
}

static int has_socket(int pid, const unsigned long *inodes, int n)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[128], target[64];
        snprintf(path, sizeof path, "%s/%.40s", dir, e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = 0;
        unsigned long ino;
        if (sscanf(target, "socket:[%lu]", &ino) != 1) continue;
        for (int i = 0; i < n; i++)
            if (inodes[i] == ino) found = 1;
    }
    closedir(d);
    return found;
}

int procs_tcp_listener(int port)
{
    if (port <= 0) return 0;
    unsigned long inodes[8];
    int n = 0;
    const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (int i = 0; i < 2; i++) {
        char *text = read_small_file(files[i], 1 << 20);
        if (text) n += procs_parse_listen(text, port, inodes + n, 8 - n);
        free(text);
    }
    if (!n) return 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int pid = 0;
    struct dirent *e;
    while (!pid && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        int cand = atoi(e->d_name);
        if (cand > 0 && has_socket(cand, inodes, n)) pid = cand;
    }
    closedir(d);
    return pid;
}

int procs_loopback_port(const char *url)
{
    if (!url || strncasecmp(url, "http://", 7)) return 0;
    const char *h = url + 7;
    const char *colon;
    if (*h == '[') {
        if (strncmp(h, "[::1]:", 6)) return 0;
        colon = h + 5;
    } else {
        colon = strchr(h, ':');
        const char *slash = strchr(h, '/');
        if (!colon || (slash && slash < colon)) return 0;
        size_t hl = (size_t)(colon - h);
        int loop = (hl == 9 && !strncasecmp(h, "localhost", 9)) || (hl >= 4 && !strncmp(h, "127.", 4));
        if (!loop) return 0;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && *end != '/') || port <= 0 || port > 65535) return 0;
    return (int)port;
}
