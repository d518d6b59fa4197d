/* Unit tests for worker/gpu (fake specs, nvidia-smi CSV, probe, JSON) and
 * worker/fingerprint.  Real GPU discovery is not exercised here: it depends
 * on the host, and the fake path is what every other test relies on. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "worker/fingerprint.h"
#include "worker/gpu.h"

#define GiB 1073741824ULL
#define MiB 1048576ULL

static void test_fake_good(void **state)
{
    (void)state;
    gpu_info g;
    char err[256] = "";
    assert_int_equal(gpu_parse_fake("RTX 3060:12:10.5", &g, err, sizeof err), 0);
    assert_string_equal(g.name, "RTX 3060");
    assert_true(g.total_bytes == 12 * GiB);
    assert_true(g.free_bytes == 10 * GiB + GiB / 2);
    assert_string_equal(g.uuid, "GPU-fake-0-rtx-3060");
    assert_int_equal(g.temp_c, 40);
    assert_int_equal(g.util_pct, 0);
    assert_int_equal(g.foreign_procs, 0);

    /* Integer and fully-used sizes, and a name with a colon in it. */
    assert_int_equal(gpu_parse_fake("A100:80:0", &g, err, sizeof err), 0);
    assert_true(g.total_bytes == 80 * GiB && g.free_bytes == 0);
    assert_int_equal(gpu_parse_fake("Odd: Name!:8:8", &g, err, sizeof err), 0);
    assert_string_equal(g.name, "Odd: Name!");
    assert_true(g.free_bytes == g.total_bytes);
    assert_string_equal(g.uuid, "GPU-fake-0-odd-name");
}

static void expect_bad(const char *spec, const char *needle)
{
    gpu_info g;
    char err[256] = "";
    assert_int_equal(gpu_parse_fake(spec, &g, err, sizeof err), -1);
    assert_true(err[0] != 0);
    assert_null(strchr(err, '\n'));
    if (!strstr(err, needle)) fail_msg("spec \"%s\": error \"%s\" lacks \"%s\"", spec, err, needle);
}

static void test_fake_bad(void **state)
{
    (void)state;
    expect_bad("RTX 3060", "NAME:TOTAL_GB:FREE_GB");
    expect_bad("RTX 3060:12", "NAME:TOTAL_GB:FREE_GB");
    expect_bad(":12:10", "name is empty");
    expect_bad("RTX::10", "NAME:TOTAL_GB:FREE_GB");
    expect_bad("RTX:12:", "NAME:TOTAL_GB:FREE_GB");
    expect_bad("RTX:twelve:10", "not a number");
    expect_bad("RTX:12:10x", "not a number");
    expect_bad("RTX:12: 10", "not a number");
    expect_bad("RTX:nan:1", "not a number");
    expect_bad("RTX:12:13", "exceeds total");
    expect_bad("RTX:-12:1", "negative");
    expect_bad("RTX:12:-1", "negative");
    expect_bad("RTX:0:0", "above zero");
    expect_bad("RTX:1e300:1", "too large");

    gpu_info g;
    char err[256];
    assert_int_equal(gpu_parse_fake(NULL, &g, err, sizeof err), -1);
    /* A NULL or empty err buffer must not be written to. */
    assert_int_equal(gpu_parse_fake("bad", &g, NULL, 0), -1);
}

static const char SMI_OUTPUT[] =
    "0, NVIDIA GeForce RTX 3090, GPU-5f8a1c2e-1b3d-4e6f-9a7b-0c1d2e3f4a5b, 24576, 23942, 45, 3\n"
    "1, NVIDIA GeForce GTX 1080 Ti, GPU-0a1b2c3d-4e5f-6789-abcd-ef0123456789, 11264, 10240, [N/A], [N/A]\n"
    "this is not a GPU line\n"
    "\n"
    "2, Tesla K80, GPU-11111111-2222-3333-4444-555555555555, [N/A], N/A, 30, [Not Supported]\r\n"
    "3,Quadro P2000,GPU-deadbeef-0000-0000-0000-000000000000,5120,5000,38,0\n"
    "6, RTX 2080, GPU-hot, 8192, 4096, 91, 100, 0x0000000000000040\n"
    "7, RTX 3080, GPU-cap, 10240, 4096, 70, 100, 0x0000000000000004\n"
    "x, Bad Index, GPU-x, 1, 1, 1, 1\n"
    "4, Bad Memory, GPU-y, lots, 1, 1, 1\n"
    "5, Too Many, GPU-z, 1, 1, 1, 1, 1, 1\n"
    "8, Bad Reasons, GPU-r, 1, 1, 1, 1, 0xzz\n";

static void test_smi_csv(void **state)
{
    (void)state;
    gpu_info g[GPU_MAX];
    int n = gpu_parse_smi_csv(SMI_OUTPUT, g, GPU_MAX);
    assert_int_equal(n, 6);
    assert_int_equal(g[0].throttled, -1);
    /* HW thermal slowdown is trouble; the software power cap at full load is not. */
    assert_int_equal(g[4].index, 6);
    assert_int_equal(g[4].throttled, 1);
    assert_int_equal(g[5].index, 7);
    assert_int_equal(g[5].throttled, 0);
    assert_int_equal(gpu_reasons_throttled(0x1), 0);
    assert_int_equal(gpu_reasons_throttled(0x20), 1);

    assert_int_equal(g[0].index, 0);
    assert_string_equal(g[0].name, "NVIDIA GeForce RTX 3090");
    assert_string_equal(g[0].uuid, "GPU-5f8a1c2e-1b3d-4e6f-9a7b-0c1d2e3f4a5b");
    assert_true(g[0].total_bytes == 24576 * MiB);
    assert_true(g[0].free_bytes == 23942 * MiB);
    assert_int_equal(g[0].temp_c, 45);
    assert_int_equal(g[0].util_pct, 3);
    assert_int_equal(g[0].foreign_procs, -1);

    assert_int_equal(g[1].index, 1);
    assert_string_equal(g[1].name, "NVIDIA GeForce GTX 1080 Ti");
    assert_true(g[1].free_bytes == 10 * GiB);
    assert_int_equal(g[1].temp_c, -1);
    assert_int_equal(g[1].util_pct, -1);

    assert_int_equal(g[2].index, 2);
    assert_string_equal(g[2].uuid, "GPU-11111111-2222-3333-4444-555555555555");
    assert_true(g[2].total_bytes == 0 && g[2].free_bytes == 0);
    assert_int_equal(g[2].temp_c, 30);
    assert_int_equal(g[2].util_pct, -1);

    assert_int_equal(g[3].index, 3);
    assert_string_equal(g[3].name, "Quadro P2000");
    assert_true(g[3].total_bytes == 5120 * MiB);

    /* max caps the count; empty and NULL input give none. */
    assert_int_equal(gpu_parse_smi_csv(SMI_OUTPUT, g, 2), 2);
    assert_int_equal(gpu_parse_smi_csv("", g, GPU_MAX), 0);
    assert_int_equal(gpu_parse_smi_csv(NULL, g, GPU_MAX), 0);
    assert_int_equal(gpu_parse_smi_csv("NVIDIA-SMI has failed because it couldn't communicate "
                                       "with the NVIDIA driver.\n", g, GPU_MAX), 0);
}

static void test_probe_fakes(void **state)
{
    (void)state;
    const char *fakes[] = {"RTX 3060:12:10.5", "RTX 4090:24:20", NULL};
    char err[256] = "";
    gpu_probe *p = gpu_probe_open(fakes, err, sizeof err);
    assert_non_null(p);
    assert_int_equal(gpu_probe_source(p), GPU_SRC_FAKE);
    assert_string_equal(gpu_source_name(gpu_probe_source(p)), "fake");

    gpu_info a[GPU_MAX], b[GPU_MAX];
    assert_int_equal(gpu_probe_read(p, a, GPU_MAX), 2);
    assert_int_equal(a[0].index, 0);
    assert_int_equal(a[1].index, 1);
    assert_string_equal(a[1].name, "RTX 4090");
    assert_string_equal(a[1].uuid, "GPU-fake-1-rtx-4090");
    assert_true(a[1].free_bytes == 20 * GiB);
    assert_int_equal(gpu_probe_read(p, b, GPU_MAX), 2);
    assert_memory_equal(a, b, 2 * sizeof a[0]);
    assert_int_equal(gpu_probe_read(p, b, 1), 1);
    gpu_probe_close(p);

    const char *bad[] = {"RTX 3060:12:10.5", "broken", NULL};
    assert_null(gpu_probe_open(bad, err, sizeof err));
    assert_non_null(strstr(err, "broken"));

    const char *many[GPU_MAX + 2];
    for (int i = 0; i <= GPU_MAX; i++) many[i] = "G:1:1";
    many[GPU_MAX + 1] = NULL;
    assert_null(gpu_probe_open(many, err, sizeof err));
}

static void test_source_names(void **state)
{
    (void)state;
    assert_string_equal(gpu_source_name(GPU_SRC_NONE), "none");
    assert_string_equal(gpu_source_name(GPU_SRC_FAKE), "fake");
    assert_string_equal(gpu_source_name(GPU_SRC_NVML), "nvml");
    assert_string_equal(gpu_source_name(GPU_SRC_SMI), "nvidia-smi");
}

/* Whatever this host has, opening without fakes must succeed and reads must
 * agree with the source it picked. */
static void test_probe_real(void **state)
{
    (void)state;
    char err[256] = "";
    gpu_probe *p = gpu_probe_open(NULL, err, sizeof err);
    assert_non_null(p);
    gpu_info g[GPU_MAX];
    int n = gpu_probe_read(p, g, GPU_MAX);
    print_message("gpu source on this host: %s, %d GPU(s)\n",
                  gpu_source_name(gpu_probe_source(p)), n);
    if (gpu_probe_source(p) == GPU_SRC_NONE) assert_int_equal(n, 0);
    else assert_true(n >= 0);
    for (int i = 0; i < n; i++) {
        print_message("  %d %s %s total=%llu free=%llu temp=%d util=%d procs=%d\n", g[i].index,
                      g[i].name, g[i].uuid, (unsigned long long)g[i].total_bytes,
                      (unsigned long long)g[i].free_bytes, g[i].temp_c, g[i].util_pct,
                      g[i].foreign_procs);
        assert_true(g[i].free_bytes <= g[i].total_bytes);
    }
    gpu_probe_close(p);
}

static void test_fingerprint(void **state)
{
    (void)state;
    gpu_info g[2];
    char err[256];
    assert_int_equal(gpu_parse_fake("A:8:8", &g[0], err, sizeof err), 0);
    assert_int_equal(gpu_parse_fake("B:8:8", &g[1], err, sizeof err), 0);

    char f1[65], f2[65], f3[65], f4[65], f5[65];
    assert_int_equal(setenv("GPUPOOL_MACHINE_ID", "machine-one", 1), 0);
    assert_int_equal(machine_fingerprint(g, 2, f1), 0);
    assert_int_equal(strlen(f1), 64);
    for (int i = 0; i < 64; i++) assert_non_null(strchr("0123456789abcdef", f1[i]));
    assert_int_equal(machine_fingerprint(g, 2, f2), 0);
    assert_string_equal(f1, f2);

    /* A different GPU set is a different fingerprint. */
    strcpy(g[1].uuid, "GPU-fake-1-c");
    assert_int_equal(machine_fingerprint(g, 2, f3), 0);
    assert_string_not_equal(f1, f3);
    assert_int_equal(machine_fingerprint(g, 1, f4), 0);
    assert_string_not_equal(f3, f4);

    /* Same GPUs on a different machine is a different fingerprint too. */
    assert_int_equal(setenv("GPUPOOL_MACHINE_ID", "machine-two", 1), 0);
    assert_int_equal(machine_fingerprint(g, 2, f5), 0);
    assert_string_not_equal(f3, f5);

    /* The digest is exactly over "id\nuuid\n...". */
    assert_int_equal(setenv("GPUPOOL_MACHINE_ID", "m", 1), 0);
    strcpy(g[0].uuid, "u");
    assert_int_equal(machine_fingerprint(g, 1, f1), 0);
    /* sha256("m\nu\n") */
    assert_string_equal(f1, "651085551843ca2849744fba72b56bbe69d007a19d1fb202cc1fca6c545f2612");

    /* Without the override the host's id is used; it must still work. */
    assert_int_equal(unsetenv("GPUPOOL_MACHINE_ID"), 0);
    assert_int_equal(machine_fingerprint(g, 2, f2), 0);
    assert_int_equal(strlen(f2), 64);
    assert_int_equal(machine_fingerprint(NULL, 0, f2), 0);
}

static void test_json(void **state)
{
    (void)state;
    gpu_info g;
    char err[256];
    assert_int_equal(gpu_parse_fake("RTX 3060:12:10.5", &g, err, sizeof err), 0);
    json_t *j = gpu_info_json(&g);
    assert_non_null(j);
    assert_int_equal(json_object_size(j), 9);
    assert_true(json_is_false(json_object_get(j, "throttled")));
    assert_int_equal(json_integer_value(json_object_get(j, "index")), 0);
    assert_string_equal(json_string_value(json_object_get(j, "name")), "RTX 3060");
    assert_string_equal(json_string_value(json_object_get(j, "uuid")), "GPU-fake-0-rtx-3060");
    assert_true(json_integer_value(json_object_get(j, "total_bytes")) == (json_int_t)(12 * GiB));
    assert_true(json_integer_value(json_object_get(j, "free_bytes")) ==
                (json_int_t)(10 * GiB + GiB / 2));
    assert_int_equal(json_integer_value(json_object_get(j, "temperature_c")), 40);
    assert_true(json_is_integer(json_object_get(j, "utilization_pct")));
    assert_int_equal(json_integer_value(json_object_get(j, "foreign_processes")), 0);
    json_decref(j);

    g.temp_c = -1;
    g.util_pct = -1;
    g.foreign_procs = -1;
    j = gpu_info_json(&g);
    assert_non_null(j);
    assert_true(json_is_null(json_object_get(j, "temperature_c")));
    assert_true(json_is_null(json_object_get(j, "utilization_pct")));
    assert_true(json_is_null(json_object_get(j, "foreign_processes")));
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fake_good),
        cmocka_unit_test(test_fake_bad),
        cmocka_unit_test(test_smi_csv),
        cmocka_unit_test(test_probe_fakes),
        cmocka_unit_test(test_source_names),
        cmocka_unit_test(test_probe_real),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
