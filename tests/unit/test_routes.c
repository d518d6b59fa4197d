/* unit: api/routes, the route table's matching: templated segments, a
 * concrete path shadowing a template, 404 against 405, the methods of a path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "api/routes.h"

static void matching(void **state)
{
    (void)state;
    char id[64], methods[64];
    int known;
    const api_route *r = api_route_find("GET", "/v1/tasks/task_abc", id, sizeof id, &known);
    assert_non_null(r);
    assert_int_equal(r->op, OP_TASK_GET);
    assert_string_equal(id, "task_abc");
    r = api_route_find("GET", "/v1/tasks/poll", id, sizeof id, &known);
    assert_int_equal(r->op, OP_TASK_POLL);
    /* The concrete path is not a task named "poll", whatever the method. */
    assert_null(api_route_find("DELETE", "/v1/tasks/poll", id, sizeof id, &known));
    assert_true(known);
    r = api_route_find("POST", "/v1/nodes/node-1/drain", id, sizeof id, &known);
    assert_int_equal(r->op, OP_NODE_DRAIN);
    assert_string_equal(id, "node-1");
    assert_null(api_route_find("GET", "/v1/nodes/node-1", id, sizeof id, &known));
    assert_true(known); /* 405, not 404 */
    assert_null(api_route_find("POST", "/v1/nodes/node-1/explode", id, sizeof id, &known));
    assert_false(known);
    assert_null(api_route_find("GET", "/v1/tasks/", id, sizeof id, &known));
    assert_false(known);
    assert_null(api_route_find("GET", "/v1/tasks/a/b", id, sizeof id, &known));
    assert_false(known);
    char tiny[4];
    assert_null(api_route_find("GET", "/v1/tasks/task_too_long", tiny, sizeof tiny, &known));
    assert_false(known);
    api_route_methods("/v1/tasks", methods, sizeof methods);
    assert_string_equal(methods, "POST, GET");
    api_route_methods("/v1/tasks/poll", methods, sizeof methods);
    assert_string_equal(methods, "GET");
    api_route_methods("/v1/tasks/x", methods, sizeof methods);
    assert_string_equal(methods, "GET, DELETE");
    assert_int_equal(api_route_methods("/nope", methods, sizeof methods), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matching),
    };
    return cmocka_run_group_tests_name("routes", tests, NULL, NULL);
}
