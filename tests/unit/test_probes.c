/* Unit tests for what the owner rules are fed: GPU process lists
 * (nvidia-smi's compute-apps CSV, fake GPU lines and files that change or
 * get lost), which processes are the worker's (worker/procs) and the fake
 * user-idle source (worker/idle). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/opts.h"
#include "worker/gpu.h"
#include "worker/idle.h"
#include "worker/procs.h"

#define GiB 1073741824ULL
#define MiB 1048576ULL

static void smi_apps(void **state)
{
    (void)state;
    gpu_info g[2];
    memset(g, 0, sizeof g);
    snprintf(g[0].uuid, sizeof g[0].uuid, "GPU-aaaa");
    snprintf(g[1].uuid, sizeof g[1].uuid, "GPU-bbbb");
    g[0].nprocs = g[1].nprocs = -1;
    const char *text = "1234, 3200, GPU-aaaa\n"
                       "  99 , [N/A], GPU-bbbb\r\n"
                       "not a line\n"
                       "\n"
                       "77, 10, GPU-unknown-card\n"
                       "-5, 10, GPU-aaaa\n"
                       "5, lots, GPU-aaaa\n"
                       "6, 10\n"
                       "4321,512,GPU-aaaa";
    assert_int_equal(gpu_parse_smi_apps(text, g, 2), 3);
    assert_int_equal(g[0].nprocs, 2);
    assert_int_equal(g[0].procs[0].pid, 1234);
    assert_true(g[0].procs[0].used_bytes == 3200 * MiB);
    assert_int_equal(g[0].procs[1].pid, 4321);
    assert_true(g[0].procs[1].used_bytes == 512 * MiB);
    assert_int_equal(g[1].nprocs, 1);
    assert_int_equal(g[1].procs[0].pid, 99);
    assert_true(g[1].procs[0].used_bytes == GPU_USED_UNKNOWN);

    /* Nothing running: every list known and empty. */
    g[0].nprocs = g[1].nprocs = -1;
    assert_int_equal(gpu_parse_smi_apps("", g, 2), 0);
    assert_int_equal(g[0].nprocs, 0);
    assert_int_equal(g[1].nprocs, 0);
    assert_int_equal(gpu_parse_smi_apps(NULL, g, 2), 0);
}

static void fake_lines(void **state)
{
    (void)state;
    gpu_info g;
    char err[256] = "";
    assert_int_equal(gpu_parse_fake_line("RTX 3060:12:10", 0, &g, err, sizeof err), 1);
    assert_int_equal(g.nprocs, 0);
    assert_int_equal(g.foreign_procs, 0);
    assert_int_equal(gpu_parse_fake_line("  RTX 3060:12:6 proc=4242:4 proc=77  ", 1, &g, err, sizeof err), 1);
    assert_string_equal(g.name, "RTX 3060");
    assert_string_equal(g.uuid, "GPU-fake-1-rtx-3060");
    assert_true(g.free_bytes == 6 * GiB);
    assert_int_equal(g.nprocs, 2);
    assert_int_equal(g.foreign_procs, 2);
    assert_int_equal(g.procs[0].pid, 4242);
    assert_true(g.procs[0].used_bytes == 4 * GiB);
    assert_int_equal(g.procs[1].pid, 77);
    assert_true(g.procs[1].used_bytes == GPU_USED_UNKNOWN);
    assert_int_equal(g.throttled, 0);
    assert_int_equal(gpu_parse_fake_line("RTX 3060:12:6 temp=88 throttled proc=5", 0, &g, err, sizeof err), 1);
    assert_string_equal(g.name, "RTX 3060");
    assert_int_equal(g.temp_c, 88);
    assert_int_equal(g.throttled, 1);
    assert_int_equal(g.nprocs, 1);

    assert_int_equal(gpu_parse_fake_line("", 0, &g, err, sizeof err), 0);
    assert_int_equal(gpu_parse_fake_line("   # a comment", 0, &g, err, sizeof err), 0);
    assert_int_equal(gpu_parse_fake_line("lost", 0, &g, err, sizeof err), 2);
    assert_int_equal(gpu_parse_fake_line(" fail ", 0, &g, err, sizeof err), 2);

    static const char *const bad[] = {"RTX:12:6 proc=", "RTX:12:6 proc=abc", "RTX:12:6 proc=12:x",
                                      "RTX:12:6 proc=0:1", "RTX:12:6 proc=5:-1", "RTX:12:6 pid=5", "RTX:12",
                                      "RTX:12:6 temp=hot", "RTX:12:6 temp=200"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        if (gpu_parse_fake_line(bad[i], 0, &g, err, sizeof err) != -1) fail_msg("\"%s\" was accepted", bad[i]);
        assert_true(err[0] != 0);
    }
}

static void write_text(const char *path, const char *text)
{
    assert_int_equal(write_file_atomic(path, text), 0);
}

/* The file is read at every probe: a process appears and goes, the GPU
 * gets lost and comes back. */
static void fake_file_changes_between_reads(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpupool-probes-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/gpus", dir);
    char err[256] = "";
    assert_null(gpu_probe_open_file(path, err, sizeof err)); /* missing */
    assert_non_null(strstr(err, "cannot read"));
    write_text(path, "RTX 3060:12:bad\n");
    assert_null(gpu_probe_open_file(path, err, sizeof err));
    assert_non_null(strstr(err, "line 1"));

    write_text(path, "# two cards\nRTX 3060:12:10\nRTX 4090:24:20\n");
    gpu_probe *p = gpu_probe_open_file(path, err, sizeof err);
    assert_non_null(p);
    assert_int_equal(gpu_probe_source(p), GPU_SRC_FAKE);
    gpu_info g[GPU_MAX];
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), 2);
    assert_string_equal(gpu_probe_error(p), "");
    assert_string_equal(g[1].uuid, "GPU-fake-1-rtx-4090");
    assert_int_equal(g[0].nprocs, 0);

    write_text(path, "RTX 3060:12:6 proc=4242:4\nRTX 4090:24:20\n");
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), 2);
    assert_int_equal(g[0].nprocs, 1);
    assert_int_equal(g[0].procs[0].pid, 4242);
    assert_string_equal(g[0].uuid, "GPU-fake-0-rtx-3060");

    write_text(path, "lost\n");
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), -1);
    assert_non_null(strstr(gpu_probe_error(p), "lost"));
    write_text(path, "RTX 3060:12:10\nRTX 4090:24:x\n");
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), -1);
    assert_non_null(strstr(gpu_probe_error(p), "line 2"));
    write_text(path, "RTX 3060:12:10\n");
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), 1);
    assert_string_equal(gpu_probe_error(p), "");
    gpu_probe_close(p);

    /* A worker may start on a GPU already lost: it opens, reads fail. */
    write_text(path, "lost\n");
    p = gpu_probe_open_file(path, err, sizeof err);
    assert_non_null(p);
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), -1);
    gpu_probe_close(p);

    /* Fixed fakes may list processes too, never be lost. */
    const char *fakes[] = {"A:8:4 proc=9:4", NULL};
    p = gpu_probe_open(fakes, err, sizeof err);
    assert_non_null(p);
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), 1);
    assert_int_equal(g[0].nprocs, 1);
    gpu_probe_close(p);
    const char *lost[] = {"lost", NULL};
    assert_null(gpu_probe_open(lost, err, sizeof err));

    unlink(path);
    rmdir(dir);
}

static void proc_stat_parent(void **state)
{
    (void)state;
    assert_int_equal(procs_parse_ppid("12276 (cat) R 12272 12272 3821 0 -1"), 12272);
    /* A command name with spaces and parentheses. */
    assert_int_equal(procs_parse_ppid("77 (a) b (c)) S 5 77 77"), 5);
    assert_int_equal(procs_parse_ppid("77 (x"), -1);
    assert_int_equal(procs_parse_ppid(""), -1);
    assert_int_equal(procs_parse_ppid(NULL), -1);
}

static void proc_descendants(void **state)
{
    (void)state;
    int me = (int)getpid(), other = 999999999;
    assert_true(procs_descends_from(me, &me, 1));
    assert_false(procs_descends_from(me, &other, 1));
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    assert_true(child > 0);
    assert_true(procs_descends_from((int)child, &me, 1));
    int parent = (int)getppid();
    assert_true(procs_descends_from((int)child, &parent, 1));
    assert_false(procs_descends_from(me, (int[]){(int)child}, 1));
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* A pid that does not exist descends from nothing. */
    assert_false(procs_descends_from(other, &me, 1));
}

static const char TCP[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 29264 1 0 100 0 0 10 0\n"
    "   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 31000 1 0 20 4 30 10 -1\n"
    "   2: 00000000:2328 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 29516 1 0 100 0 0 10 0\n";
static const char TCP6[] =
    "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 44444 1 0 100 0 0 10 0\n";

static void proc_tcp_listeners(void **state)
{
    (void)state;
    unsigned long ino[4];
    /* Port 8080 (0x1F90): only the listening row, not the connection. */
    assert_int_equal(procs_parse_listen(TCP, 8080, ino, 4), 1);
    assert_true(ino[0] == 29264);
    assert_int_equal(procs_parse_listen(TCP, 9000, ino, 4), 1);
    assert_true(ino[0] == 29516);
    assert_int_equal(procs_parse_listen(TCP, 1234, ino, 4), 0);
    assert_int_equal(procs_parse_listen(TCP6, 8080, ino, 4), 1);
    assert_true(ino[0] == 44444);
    assert_int_equal(procs_parse_listen(NULL, 8080, ino, 4), 0);

    /* A real socket of this process. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    assert_int_equal(procs_tcp_listener(ntohs(a.sin_port)), (int)getpid());
    close(fd);
    assert_int_equal(procs_tcp_listener(ntohs(a.sin_port)), 0);
    assert_int_equal(procs_tcp_listener(0), 0);
}

static void loopback_ports(void **state)
{
    (void)state;
    assert_int_equal(procs_loopback_port("http://127.0.0.1:8080"), 8080);
    assert_int_equal(procs_loopback_port("http://localhost:11434/"), 11434);
    assert_int_equal(procs_loopback_port("http://127.1.2.3:8000/v1"), 8000);
    assert_int_equal(procs_loopback_port("http://[::1]:9000"), 9000);
    assert_int_equal(procs_loopback_port("http://192.168.1.5:8080"), 0);
    assert_int_equal(procs_loopback_port("http://localhost/"), 0);
    assert_int_equal(procs_loopback_port("http://127.0.0.1:99999"), 0);
    assert_int_equal(procs_loopback_port("https://127.0.0.1:8080"), 0);
    assert_int_equal(procs_loopback_port("http://localhostx:80"), 0);
    assert_int_equal(procs_loopback_port(NULL), 0);
}

static void idle_from_fake_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpupool-idle-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], why[200];
    snprintf(path, sizeof path, "%s/idle", dir);
    idle_source *s = idle_open(path, 0);
    assert_non_null(s);
    assert_int_equal(idle_read(s, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "cannot read"));
    write_text(path, "12\n");
    assert_int_equal(idle_read(s, 1000, why, sizeof why), 12);
    write_text(path, "3600.5");
    assert_int_equal(idle_read(s, 2000, why, sizeof why), 3600);
    write_text(path, "soon");
    assert_int_equal(idle_read(s, 3000, why, sizeof why), -1);
    assert_non_null(strstr(why, "seconds"));
    write_text(path, "-4");
    assert_int_equal(idle_read(s, 3000, why, sizeof why), -1);
    idle_close(s);
    unlink(path);
    rmdir(dir);

    /* The devices: whatever this host has, the answer is a time or a reason. */
    s = idle_open(NULL, 0);
    int64_t v = idle_read(s, 5000, why, sizeof why);
    print_message("user idle on this host: %lld s%s%s\n", (long long)v, why[0] ? ", " : "", why);
    if (v < 0) assert_true(why[0] != 0);
    else assert_true(v >= 0 && v <= 5);
    idle_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smi_apps),
        cmocka_unit_test(fake_lines),
        cmocka_unit_test(fake_file_changes_between_reads),
        cmocka_unit_test(proc_stat_parent),
        cmocka_unit_test(proc_descendants),
        cmocka_unit_test(proc_tcp_listeners),
        cmocka_unit_test(loopback_ports),
        cmocka_unit_test(idle_from_fake_file),
    };
    return cmocka_run_group_tests_name("probes", tests, NULL, NULL);
}
