# gpupool build.  `make` builds build/gpupool; `make test` installs dependencies,
# builds with ASan+UBSan into build-asan/ and runs every unit and end-to-end test;
# `make run` installs, builds and starts a local pool.
CC      ?= cc
PKGS    := libmicrohttpd libcurl jansson sqlite3 libpcre2-8 libcrypto
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
BASEFLAGS := -std=c17 -D_GNU_SOURCE $(WARN) -Isrc $(PKG_CFLAGS) -pthread
CFLAGS  ?= -O2 -g
LDLIBS  := $(PKG_LIBS) -ldl -lm -pthread

SRC      := $(filter-out $(EXCLUDE),$(sort $(shell find src -name '*.c' ! -path 'src/main.c')))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
E2E_SRC  := $(sort $(wildcard tests/e2e/test_*.c))
E2E_LIB  := tests/e2e/harness.c
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))

B ?= build
# docs/openapi.json is compiled in (served at /openapi.json): a generated C
# source in the build directory, so a clean clone builds with nothing extra.
GEN_OBJ  := $(B)/obj/gen/openapi_doc.o
OBJ      := $(SRC:%.c=$(B)/obj/%.o) $(GEN_OBJ)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
E2E_BIN  := $(E2E_SRC:tests/e2e/%.c=$(B)/e2e/%)
FUZZ_BIN := $(FUZZ_SRC:fuzz/%.c=$(B)/fuzz/%) $(B)/fuzz/seeds

.PHONY: all deps test run clean unit e2e fuzz asan fmt check-clang bench openapi-lint
all: $(B)/gpupool

deps:
	@scripts/deps.sh

Q := $(if $(V),,@)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC    $<")
	$(Q)$(CC) $(BASEFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(B)/gen/openapi_doc.c: docs/openapi.json scripts/embed.sh
	@mkdir -p $(dir $@)
	$(Q)scripts/embed.sh gpupool_openapi_doc $< $@

$(B)/obj/gen/%.o: $(B)/gen/%.c
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC    $<")
	$(Q)$(CC) $(BASEFLAGS) $(CFLAGS) -c $< -o $@

$(B)/libgpupool.a: $(OBJ)
	@rm -f $@
	$(Q)ar rcs $@ $^

$(B)/gpupool: $(B)/obj/src/main.o $(B)/libgpupool.a
	@$(if $(V),,echo "  LINK  $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(B)/tests/%: tests/unit/%.c $(B)/libgpupool.a
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  TEST  $@")
	$(Q)$(CC) $(BASEFLAGS) $(CFLAGS) -Itests -o $@ $< $(B)/libgpupool.a $(LDLIBS) -lcmocka

$(B)/e2e/%: tests/e2e/%.c $(E2E_LIB) tests/e2e/harness.h $(B)/libgpupool.a
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  E2E   $@")
	$(Q)$(CC) $(BASEFLAGS) $(CFLAGS) -Itests -o $@ $< $(E2E_LIB) $(B)/libgpupool.a $(LDLIBS) -lcmocka

# The fuzz targets, built without libFuzzer: fuzz/replay.c runs each over
# its seeds and past crashes (scripts/run-tests.sh); fuzz/run_*.sh search.
$(B)/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/replay.c $(B)/libgpupool.a
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  FUZZ  $@")
	$(Q)$(CC) $(BASEFLAGS) $(CFLAGS) -Itests -o $@ $< fuzz/replay.c $(B)/libgpupool.a $(LDLIBS) -lcmocka

$(B)/fuzz/seeds: fuzz/seeds.c $(B)/libgpupool.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(BASEFLAGS) $(CFLAGS) -Itests -o $@ $< $(B)/libgpupool.a $(LDLIBS)

unit: $(UNIT_BIN)
e2e: $(E2E_BIN)
fuzz: $(FUZZ_BIN)

SAN := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
asan:
	$(MAKE) B=build-asan CFLAGS="$(SAN)" build-asan/gpupool unit e2e fuzz

test: deps
	$(MAKE) asan
	scripts/run-tests.sh build-asan

# The OpenAPI document through a real validator (installs it into .tools/).
openapi-lint:
	tests/openapi/validate.sh

run: deps all
	scripts/run-local.sh

bench: all
	bench/gateway.sh

# The same code must stay clean under clang too.
check-clang:
	$(MAKE) B=build-clang CC=clang build-clang/gpupool unit e2e fuzz

clean:
	rm -rf build build-asan build-clang

-include $(shell find $(B) -name '*.d' 2>/dev/null)
