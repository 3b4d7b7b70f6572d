# ratel — one GNU Makefile.
#
#   make            libratel.a, libratel.so, the ratel CLI, the Redis
#                   module ratel.so, rateld, captchad and the man pages
#                   in build/
#   make test       the whole suite (unit, property, CLI, fuzz smoke)
#   make asan       the suite built with AddressSanitizer + UBSan
#   make valgrind   the unit suite under valgrind (errors and leaks fatal)
#   make bench      benchmarks; prints figures and ratios to peers
#   make fuzz       longer libFuzzer runs of every parser (FUZZ_SECONDS=60)
#   make run        rateld on examples/rateld.yaml (the main job)
#   make demo       a replay of the bundled trace, with charts
#   make install    install under PREFIX (/usr/local), honouring DESTDIR and
#                   the GNU directory variables (docs/install.md)
#   make uninstall  remove what `make install` put there
#   make deb        the Debian packages in build/deb/, checked by lintian
#                   (docs/install.md)
#   make clean
#
# CC, CFLAGS, CPPFLAGS, LDFLAGS (added to every link, as dpkg-buildflags
# expects), BUILD, SANITIZE, WERROR and REDISMODULE_H are overridable.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wpointer-arith -Wvla
# Warnings are errors in a git checkout (development and CI), not in a
# release built from a tarball or a package with a newer compiler:
# `make WERROR=` turns it off, `make WERROR=-Werror` on.
WERROR   ?= $(if $(wildcard .git),-Werror)
BASE     := -std=gnu11 -fPIC -fvisibility=hidden -pthread $(WARN) $(WERROR)
# Each object's header dependencies, written by the compiler beside it
# (-MMD) and read back below, so a changed header rebuilds exactly what
# includes it; -MP keeps a deleted header from breaking the build.
DEPFLAGS := -MMD -MP
CPPFLAGS += -D_GNU_SOURCE
# Include paths per area (docs/layout.md, "Source layout"): an object sees
# the public header, its own area and the documented internal headers it
# is allowed, nothing else. libratel (lib/) sees itself. The server kit
# (server/) and the programs see libratel only through lib/internal/
# (ratel_internal.h); rateld and captchad name their own headers from the
# top ("rateld/config.h"), hence -I. for them. Unit and fuzz tests and
# benchmarks are white-box: they reach every area's headers.
INC_lib      := -Iinclude -Ilib
INC_server   := -Iinclude -Iserver -Ilib/internal
INC_cli      := -Iinclude -Ilib/internal
INC_module   := -Iinclude
INC_rateld   := -Iinclude -Ilib/internal -Iserver -I. -I$(BUILD)/gen/proto
INC_captchad := -Iinclude -Ilib/internal -Iserver -I.
INC_tests    := -Iinclude -Ilib -Ilib/internal -Iserver -I. -I$(BUILD)/gen/proto
INC_bench    := -Iinclude -Ilib -Ilib/internal -Iserver
INC_integration := -Iinclude -Ilib/internal
# The area of the object being built: build/obj/AREA/...
area = $(word 1,$(subst /, ,$(patsubst $(OBJ)/%,%,$@)))
SANITIZE ?=
# Link-time optimisation lets the decision path inline across the core's
# files (about a quarter faster). Fat objects keep libratel.a usable by
# linkers without LTO. `make LTO=` turns it off. clang (`make CC=clang
# CXX=clang++`, built once by `make test`) builds without: clang 14 makes
# no fat objects, and an archive of bitcode alone would need LLVM's linker
# plugin in every program and nginx module that links libratel.a
# (`make CC=clang LTO=-flto=thin` where they have it). An archive of LTO
# objects is indexed by the compiler's own ar.
CC_IS_CLANG := $(shell $(CC) -dM -E -x c /dev/null 2>/dev/null | grep -q __clang__ && echo 1)
LTO      ?= $(if $(CC_IS_CLANG),,-flto=auto -ffat-lto-objects)
AR       := $(if $(LTO),$(if $(CC_IS_CLANG),llvm-ar,gcc-ar),ar)
ALL_CFLAGS = $(BASE) $(CFLAGS) $(SANITIZE) $(LTO)
# C++ only where a library is C++ (server/app/phone.cc, the shim over
# libphonenumber): C's warnings that apply to C++ (-Wmissing-declarations
# is -Wmissing-prototypes' C++ name), and the same PIC, visibility,
# sanitizers and LTO. UBSan's vptr check needs the C++ runtime of the
# sanitizer, which a link by $(CC) does not bring: off.
CXX      ?= g++
CXXFLAGS ?= $(OPT) -g
CXXWARN  := -Wall -Wextra -Wshadow -Wpointer-arith -Wvla -Wmissing-declarations
ALL_CXXFLAGS = -std=gnu++17 -fPIC -fvisibility=hidden -pthread $(CXXWARN) \
               $(WERROR) $(CXXFLAGS) $(SANITIZE) \
               $(if $(SANITIZE),-fno-sanitize=vptr) $(LTO)
# hiredis (Debian's libhiredis-dev) for the Redis store's protocol; its
# transports (lib/store/transport_*.c) speak TLS with OpenSSL (libssl-dev)
# and run on libevent's loop with its OpenSSL bufferevents
# (libevent-dev).
HIREDIS_LIBS := $(shell pkg-config --libs hiredis 2>/dev/null || echo -lhiredis)
STORE_LIBS := $(shell pkg-config --libs openssl libevent libevent_openssl 2>/dev/null || echo -lssl -lcrypto -levent -levent_openssl)
LDLIBS   += $(HIREDIS_LIBS) $(STORE_LIBS) -pthread

# rateld and the captcha service: libevent (the event loop), http-parser
# (HTTP/1.1 parsing), libyaml (config), cJSON (request bodies), libsystemd
# (sd_notify: readiness and reloads told to systemd, docs/deployment.md),
# nghttp2 (HTTP/2 for gRPC) and protobuf-c (Envoy's messages; docs/envoy.md
# says why these).
SERVER_LIBS := $(shell pkg-config --libs libevent yaml-0.1 libcjson libsystemd libnghttp2 libprotobuf-c 2>/dev/null || echo -levent -lyaml -lcjson -lsystemd -lnghttp2 -lprotobuf-c) -lhttp_parser
# What libratel_app.a needs besides: libphonenumber (Debian's
# libphonenumber-dev ships no .pc) for phone numbers in E.164
# (server/app/phone.h says why), and the C++ runtime of its shim, since
# programs are linked by $(CC).
APP_LIBS := -lphonenumber -lstdc++

# Protocol definitions: ours in proto/ (Envoy's rate limit service and
# gRPC health, written from their published APIs), and the well-known
# types they import from libprotobuf-dev's /usr/include/google/protobuf.
# protoc-c turns them into C in $(BUILD)/gen/proto.
PROTO_INCLUDE ?= /usr/include
PROTO_SRC := $(sort $(shell find proto -name '*.proto'))
PROTO_WKT := duration wrappers struct
PROTO_C   := $(PROTO_SRC:proto/%.proto=$(BUILD)/gen/proto/%.pb-c.c) \
             $(PROTO_WKT:%=$(BUILD)/gen/proto/google/protobuf/%.pb-c.c)
PROTO_OBJ := $(PROTO_C:.c=.o)

CORE_SRC  := $(sort $(wildcard lib/core/*.c))
HTTP_SRC  := $(sort $(wildcard server/http/*.c))
# Code rateld and captchad share as equals (server/app/: YAML readers, log,
# client address, main skeleton, strict JSON, RateLimit headers).
APP_SRC   := $(sort $(wildcard server/app/*.c))
APP_CXX_SRC := $(sort $(wildcard server/app/*.cc))
DAEMON_SRC := $(sort $(filter-out rateld/main.c,$(wildcard rateld/*.c)))
# lib/tz reads the system's time-zone database for tz=Area/City rules.
LIB_SRC   := $(sort $(wildcard lib/core/*.c lib/tz/*.c lib/store/*.c))
MOD_SRC   := $(sort $(wildcard module/*.c))
CLI_SRC   := $(sort $(wildcard cli/*.c))
UNIT_SRC  := $(sort $(wildcard tests/unit/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/*.c))

# Objects go under $(BUILD)/obj, mirroring the tree (build/obj/rateld/
# beside the program build/rateld).
OBJ       := $(BUILD)/obj
LIB_OBJ   := $(LIB_SRC:%.c=$(OBJ)/%.o) $(BUILD)/gen/lua_script.o
CORE_OBJ  := $(CORE_SRC:%.c=$(OBJ)/%.o)
MOD_OBJ   := $(MOD_SRC:%.c=$(OBJ)/%.o) $(CORE_SRC:%.c=$(OBJ)/modcore/%.o)
CLI_OBJ   := $(CLI_SRC:%.c=$(OBJ)/%.o)
UNIT_OBJ  := $(UNIT_SRC:%.c=$(OBJ)/%.o)
HTTP_OBJ  := $(HTTP_SRC:%.c=$(OBJ)/%.o)
APP_OBJ   := $(APP_SRC:%.c=$(OBJ)/%.o) $(APP_CXX_SRC:%.cc=$(OBJ)/%.o)
APP_LIB   := $(if $(APP_SRC),$(BUILD)/libratel_app.a)
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(OBJ)/%.o)
# The shared library's version and soname come from RATEL_VERSION.
VERSION   := $(shell sed -n 's/^\#define RATEL_VERSION "\(.*\)"/\1/p' include/ratel.h)
SONAME    := libratel.so.$(firstword $(subst ., ,$(VERSION)))

.PHONY: all test asan valgrind bench fuzz clean format format-check module lua man
all: lua man $(BUILD)/libratel.a $(BUILD)/libratel.so $(BUILD)/ratel module $(BUILD)/rateld

$(OBJ)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(INC_$(area)) $(CPPFLAGS) $(DEPFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(OBJ)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(INC_$(area)) $(CPPFLAGS) $(DEPFLAGS) $(ALL_CXXFLAGS) -c $< -o $@

# The Functions library and the EVAL script, joined from lua/*.lua by a
# POSIX shell script (docs/lua.md), and compiled into libratel as strings
# for the Redis store.
LUA_OUT := $(BUILD)/lua/ratel.lib.lua $(BUILD)/lua/ratel.eval.lua
lua: $(LUA_OUT)

$(LUA_OUT) &: $(wildcard lua/*.lua) scripts/lua-build.sh include/ratel.h
	sh scripts/lua-build.sh $(BUILD)/lua

# The man pages rateld(8), ratel(1), rateld.yaml(5) and captchad(8),
# generated from the documents they are made of by go-md2man.
MAN_OUT := $(BUILD)/man/rateld.8 $(BUILD)/man/ratel.1 \
           $(BUILD)/man/rateld.yaml.5 $(BUILD)/man/captchad.8
man: $(MAN_OUT)

$(MAN_OUT) &: docs/rateld.md docs/cli.md docs/config.md \
              captchad/README.md scripts/man.sh include/ratel.h
	sh scripts/man.sh $(BUILD)/man

$(BUILD)/gen/lua_script.c: $(LUA_OUT) scripts/embed-lua.sh
	scripts/embed-lua.sh $(LUA_OUT) $@

$(BUILD)/gen/lua_script.o: $(BUILD)/gen/lua_script.c
	$(CC) $(INC_lib) $(CPPFLAGS) $(DEPFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libratel.a: $(LIB_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

# libratel.so.VERSION with its soname (libratel.so.0), and the two links
# a system has: the soname's for the loader, libratel.so for the linker.
$(BUILD)/libratel.so.$(VERSION): $(LIB_OBJ)
	$(CC) $(ALL_CFLAGS) -shared -Wl,-soname,$(SONAME) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/libratel.so: $(BUILD)/libratel.so.$(VERSION)
	ln -sf libratel.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf libratel.so.$(VERSION) $@

$(BUILD)/ratel: $(CLI_OBJ) $(BUILD)/libratel.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The HTTP server rateld and the captcha service share (server/http/).
$(BUILD)/libratel_http.a: $(HTTP_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

# What rateld and captchad share (server/app/).
$(BUILD)/libratel_app.a: $(APP_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

$(PROTO_C) &: $(PROTO_SRC)
	@mkdir -p $(BUILD)/gen/proto
	protoc-c --c_out=$(BUILD)/gen/proto -Iproto -I$(PROTO_INCLUDE) $(PROTO_SRC) \
	  $(PROTO_WKT:%=$(PROTO_INCLUDE)/google/protobuf/%.proto)

# Generated code: compiled without our warnings (it is protoc-c's style).
$(PROTO_OBJ): %.o: %.c
	$(CC) -I$(BUILD)/gen/proto $(CPPFLAGS) $(filter-out $(WARN) -Werror,$(BASE)) $(CFLAGS) $(SANITIZE) $(LTO) -c $< -o $@

$(BUILD)/libratel_proto.a: $(PROTO_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

# Everything in rateld/ may include a generated header.
$(DAEMON_OBJ) $(OBJ)/rateld/main.o $(UNIT_OBJ): | $(PROTO_C)

# rateld: rateld/ on libratel and the HTTP server.
$(BUILD)/rateld: $(OBJ)/rateld/main.o $(DAEMON_OBJ) $(APP_LIB) $(BUILD)/libratel_http.a $(BUILD)/libratel_proto.a $(BUILD)/libratel.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(APP_LIBS) $(SERVER_LIBS) $(LDLIBS)

# The Redis module: the core's objects and module/ in one shared object that
# exports RedisModule_OnLoad only (-fvisibility=hidden; redis-server links
# -rdynamic, so a stray symbol could bind to the server's). redismodule.h
# is Debian's, fetched at build time (scripts/redismodule-h.sh), or yours:
# make REDISMODULE_H=/path/to/redismodule.h
REDISMODULE_H ?= $(BUILD)/redismodule/redismodule.h
module: $(BUILD)/ratel.so

$(BUILD)/redismodule/redismodule.h:
	scripts/redismodule-h.sh $@

# ratel.so is built without $(SANITIZE): redis-server does not carry the
# sanitizers' runtime. The code it shares with libratel is sanitized there,
# and module/args.c by its fuzz target.
MOD_CFLAGS = $(BASE) $(CFLAGS) $(LTO)

$(OBJ)/module/%.o: module/%.c $(REDISMODULE_H)
	@mkdir -p $(dir $@)
	$(CC) $(INC_module) $(CPPFLAGS) $(DEPFLAGS) -isystem $(dir $(REDISMODULE_H)) $(MOD_CFLAGS) -c $< -o $@

# The core again, its public symbols hidden too, and without lib/tz: the
# module takes tz offsets as the Lua script does, not zone names
# (docs/algorithms.md says why).
$(OBJ)/modcore/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(INC_lib) $(CPPFLAGS) $(DEPFLAGS) -DRATEL_HIDDEN -DRATEL_NO_TZDB $(MOD_CFLAGS) -c $< -o $@

$(BUILD)/ratel.so: $(MOD_OBJ)
	$(CC) $(MOD_CFLAGS) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The conformance driver: core, module and Lua script on the same traces.
$(BUILD)/conform: tests/integration/conform.c $(BUILD)/libratel.a
	$(CC) $(INC_integration) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The synchronous API under a steady load while a cluster master is
# killed (test_fault_cluster.sh).
$(BUILD)/cluster_sync: tests/integration/cluster_sync.c $(BUILD)/libratel.a
	$(CC) $(INC_integration) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The Redis store against real redis-servers (tests/integration/servers.c
# starts, kills and restarts them).
# The test servers: plain, TLS-only, clusters and Sentinel setups.
TEST_SERVERS := tests/integration/servers.c tests/integration/servers_tls.c \
                tests/integration/servers_sentinel.c
TEST_SERVERS_OBJ := $(TEST_SERVERS:%.c=$(OBJ)/%.o)

$(BUILD)/test_redis_store: tests/integration/test_redis_store.c tests/integration/store_test.h $(TEST_SERVERS) tests/integration/servers.h $(BUILD)/libratel.a
	$(CC) $(INC_integration) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

# The store over TLS and through Sentinel (the same harness).
$(BUILD)/test_redis_reach: tests/integration/test_redis_reach.c tests/integration/store_test.h $(TEST_SERVERS) tests/integration/servers.h $(BUILD)/libratel.a
	$(CC) $(INC_integration) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

# The lease simulator: hosts with slices of one key on a real redis-server.
$(BUILD)/lease_sim: tests/integration/lease_sim.c tests/integration/store_test.h $(TEST_SERVERS) tests/integration/servers.h $(BUILD)/libratel.a
	$(CC) $(INC_integration) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

# The harness's own test (starts, kills and restarts servers; a cluster,
# TLS, Sentinel).
$(BUILD)/servers_selftest: tests/integration/servers_selftest.c $(TEST_SERVERS) tests/integration/servers.h
	$(CC) $(INC_integration) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^) $(LDLIBS)

# The runner lists the suites: a new one in suites.def rebuilds it.
$(OBJ)/tests/unit/main.o: tests/unit/suites.def

# The TLS and transport suites start real (TLS-only too) redis-servers.
$(BUILD)/test_unit: $(UNIT_OBJ) $(TEST_SERVERS_OBJ) $(DAEMON_OBJ) $(APP_LIB) $(if $(HTTP_SRC),$(BUILD)/libratel_http.a) $(BUILD)/libratel_proto.a $(BUILD)/libratel.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(APP_LIBS) $(SERVER_LIBS) $(LDLIBS)

# Fuzz targets: a standalone driver (tests/fuzz/driver.c, random and mutated
# inputs) links with any compiler; `make fuzz` uses clang's libFuzzer.
$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/driver.c $(DAEMON_OBJ) $(APP_LIB) $(if $(HTTP_SRC),$(BUILD)/libratel_http.a) $(BUILD)/libratel_proto.a $(BUILD)/libratel.a
	$(CC) $(INC_tests) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(APP_LIBS) $(SERVER_LIBS) $(LDLIBS)

# The module's argument parser is pure C: fuzzed like the core.
$(BUILD)/fuzz_module_args: tests/fuzz/fuzz_module_args.c module/args.c tests/fuzz/driver.c $(BUILD)/libratel.a
	$(CC) $(INC_tests) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The Redis engine's target drives it through the tests' in-memory
# transport.
$(BUILD)/fuzz_engine: tests/fuzz/fuzz_engine.c tests/unit/mem_transport.c tests/unit/mem_transport.h tests/fuzz/driver.c $(BUILD)/libratel.a
	$(CC) $(INC_tests) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

FUZZ_BINS := $(patsubst tests/fuzz/fuzz_%.c,$(BUILD)/fuzz_%,$(filter tests/fuzz/fuzz_%.c,$(FUZZ_SRC)))

$(BUILD)/bench_%: bench/bench_%.c $(BUILD)/libratel.a
	$(CC) $(INC_bench) $(CPPFLAGS) $(ALL_CFLAGS) -O2 $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The HTTP server alone, answering like rateld (bench/rateld.sh's floor).
$(BUILD)/bench_http: bench/bench_http.c $(BUILD)/libratel_http.a
	$(CC) $(INC_bench) $(CPPFLAGS) $(ALL_CFLAGS) -O2 $(LDFLAGS) -o $@ $^ $(SERVER_LIBS) $(LDLIBS)

BENCH_BINS := $(patsubst bench/bench_%.c,$(BUILD)/bench_%,$(BENCH_SRC))

test: all $(BENCH_BINS) $(BUILD)/test_unit $(FUZZ_BINS) $(BUILD)/conform $(BUILD)/lease_sim $(BUILD)/cluster_sync $(BUILD)/test_redis_store $(BUILD)/test_redis_reach $(BUILD)/servers_selftest
	BUILD=$(BUILD) tests/run.sh

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 LTO= \
	    SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" test

valgrind: $(BUILD)/test_unit $(BUILD)/fuzz_engine $(BUILD)/ratel $(BUILD)/test_redis_store $(BUILD)/test_redis_reach module $(BUILD)/rateld $(BUILD)/captchad
	BUILD=$(BUILD) tests/valgrind.sh

bench: all $(BENCH_BINS)
	BUILD=$(BUILD) bench/run.sh

fuzz:
	FUZZ_SECONDS=$${FUZZ_SECONDS:-60} tests/fuzz/libfuzzer.sh

# Every C file and header of the tree, and the C++ of server/ (the
# libphonenumber shim) (tests/integration/test_format.sh checks that
# `make format` would change nothing).
C_FILES = $(sort $(wildcard include/*.h lib/*/*.[ch] server/*/*.[ch] server/*/*.cc cli/*.[ch] rateld/*.[ch] \
            module/*.[ch] nginx/*.[ch] captchad/*.[ch] examples/*/*.[ch] tests/*/*.[ch] bench/*.c))
format:
	clang-format -i $(C_FILES)

# Names every file `make format` would change; fails if there is one.
format-check:
	@clang-format --dry-run $(C_FILES) 2>&1 | sed -n 's/:[0-9]*:[0-9]*: warning: code should be clang-formatted.*//p' | sort -u >$(BUILD)/format-check.out; \
	if [ -s $(BUILD)/format-check.out ]; then echo "not clang-formatted (make format):"; cat $(BUILD)/format-check.out; exit 1; fi

clean:
	rm -rf build build-asan build-fuzz build-clang

# ratel's main job: rateld on examples/rateld.yaml with the embedded store
# (RATELD_CONFIG= another file), in the foreground until Ctrl-C. The
# example's admin_token is empty: the reset endpoint is off (403); a file
# of your own with a token of 32+ bytes turns it on.
RATELD_CONFIG ?= examples/rateld.yaml
.PHONY: run demo
run: all
	$(BUILD)/rateld --config $(RATELD_CONFIG)

# Replay the bundled trace through policies and draw the chart.
demo: all
	BUILD=$(BUILD) scripts/demo.sh

# ---------------------------------------------------------------- captchad
# The SMS verification-code service (captchad/): libratel, the
# shared HTTP server, the code it shares with rateld as an equal (server/app/:
# YAML readers, log, client address, main skeleton), SQLite for notices
# and libcurl for the webhook sender.
CAPTCHA_SRC  := $(sort $(wildcard captchad/*.c))
CAPTCHA_OBJ  := $(CAPTCHA_SRC:%.c=$(OBJ)/%.o)
CAPTCHA_LIBS := $(shell pkg-config --libs sqlite3 libcurl 2>/dev/null || echo -lsqlite3 -lcurl)

$(OBJ)/captchad/%.o: captchad/%.c
	@mkdir -p $(dir $@)
	$(CC) $(INC_captchad) $(CPPFLAGS) $(DEPFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/captchad: $(CAPTCHA_OBJ) $(APP_LIB) $(BUILD)/libratel_http.a $(BUILD)/libratel.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(APP_LIBS) $(SERVER_LIBS) $(CAPTCHA_LIBS) $(LDLIBS)

all: $(BUILD)/captchad
test: $(BUILD)/captchad

# The fuzz target of captchad's config parser compiles the parser in (as
# tests/fuzz/libfuzzer.sh does too); it overrides the fuzz_% pattern.
$(BUILD)/fuzz_captcha_config: tests/fuzz/fuzz_captcha_config.c tests/fuzz/driver.c captchad/captcha_config.c captchad/captcha.h $(APP_LIB) $(BUILD)/libratel_http.a $(BUILD)/libratel.a
	$(CC) $(INC_tests) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter-out captchad/%,$(filter %.c %.o %.a,$^)) $(APP_LIBS) $(SERVER_LIBS) $(LDLIBS)

# ---------------------------------------------------------------- nginx
# ngx_http_ratel_module.so for Debian's nginx (nginx-dev: its configure,
# conf_flags and headers in /usr/share/nginx/src), built the way Debian
# builds a module (dh-sequence-nginx's nginx_mod.pm): nginx's configure with
# conf_flags (--with-compat) and --add-dynamic-module=nginx/, then its
# `modules` target. configure writes a Makefile where it runs, so it runs
# in a tree of links to nginx's sources under $(BUILD)/nginx/, once per
# build directory, and again only when nginx/config or the list of
# nginx/*.c changes. The module links libratel.a of the same build
# directory ($(SANITIZE) too: under ASan nginx runs with the runtime
# preloaded, tests/integration/nginx_lib.sh).
NGX_SRC    ?= /usr/share/nginx/src
NGX_DIR    := $(BUILD)/nginx
NGX_ABS    := $(abspath $(NGX_DIR))
NGX_MODULE := $(NGX_DIR)/ngx_http_ratel_module.so
NGX_FILES  := $(sort $(wildcard nginx/*.c))
NGX_DEPS   := $(NGX_FILES) $(wildcard nginx/*.h) nginx/ngx_http_ratel_module.map \
              server/app/ratelimit.h server/app/keys.h include/ratel.h \
              lib/internal/ratel_internal.h $(wildcard lib/store/*.h)
NGX_CFLAGS  = $(shell dpkg-buildflags --get CFLAGS) -fPIC \
              $(shell dpkg-buildflags --get CPPFLAGS) $(SANITIZE)
NGX_LDFLAGS = $(shell dpkg-buildflags --get LDFLAGS) -fPIC $(SANITIZE)
# What libratel_app.a's and libratel.a's objects the module uses need:
# libphonenumber and the C++ runtime (phone numbers), cJSON (json: keys),
# hiredis and OpenSSL for the Redis store (its nginx transport is the
# module's own, so no libevent), libm for the core.
NGX_LIBS   ?= $(APP_LIBS) $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson) $(HIREDIS_LIBS) $(shell pkg-config --libs openssl 2>/dev/null || echo -lssl -lcrypto) -lm

.PHONY: nginx-module FORCE
nginx-module: $(NGX_MODULE)
# Part of `all` where nginx-dev is installed (scripts/setup.sh --test
# installs it; it depends on nginx, which the base set-up leaves out).
ifneq ($(wildcard $(NGX_SRC)/configure),)
all: $(NGX_MODULE)
else
all: nginx-module-skipped
.PHONY: nginx-module-skipped
nginx-module-skipped:
	@echo "nginx module not built: $(NGX_SRC) is missing (apt install nginx-dev, or scripts/setup.sh --test)"
endif
valgrind: $(NGX_MODULE)

# The list of the module's sources, rewritten only when it changes.
$(NGX_DIR)/files: FORCE
	@mkdir -p $(@D)
	@echo '$(NGX_FILES) $(NGX_LIBS)' | cmp -s - $@ || echo '$(NGX_FILES) $(NGX_LIBS)' >$@

$(NGX_DIR)/objs/Makefile: nginx/config $(NGX_DIR)/files
	rm -rf $(NGX_DIR)/tree $(NGX_DIR)/objs
	mkdir -p $(NGX_DIR)/tree
	ln -s $(NGX_SRC)/auto $(NGX_SRC)/src $(NGX_SRC)/configure $(NGX_DIR)/tree/
	cd $(NGX_DIR)/tree && CC='$(CC)' RATEL_LIBRATEL='$(abspath $(BUILD))/libratel.a' \
	    RATEL_APP='$(abspath $(BUILD))/libratel_app.a' \
	    RATEL_HTTP='$(abspath $(BUILD))/libratel_http.a' \
	    RATEL_LIBS='$(NGX_LIBS)' bash -c '. $(NGX_SRC)/conf_flags && ./configure \
	    --with-cc-opt="$(NGX_CFLAGS)" --with-ld-opt="$(NGX_LDFLAGS)" \
	    "$${NGX_CONF_FLAGS[@]}" --add-dynamic-module=$(CURDIR)/nginx \
	    --builddir=$(NGX_ABS)/objs' >$(NGX_ABS)/configure.log 2>&1 || \
	    { tail -20 $(NGX_ABS)/configure.log; rm -f $@; exit 1; }

# nginx's own make, without ours's variables (a CFLAGS=... given to this
# make would replace nginx's); the module is linked again whenever a
# source or libratel.a changed.
$(NGX_MODULE): $(NGX_DIR)/objs/Makefile $(NGX_DEPS) $(APP_LIB) $(BUILD)/libratel_http.a $(BUILD)/libratel.a
	rm -f $(NGX_DIR)/objs/ngx_http_ratel_module.so
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -f $(NGX_ABS)/objs/Makefile \
	    -C $(NGX_DIR)/tree modules
	cp $(NGX_DIR)/objs/ngx_http_ratel_module.so $@

# The compiler's header dependencies of every object built so far.
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---------------------------------------------------------------- install
# GNU directory variables (docs/install.md); DESTDIR stages the whole tree.
PREFIX         ?= /usr/local
prefix         ?= $(PREFIX)
exec_prefix    ?= $(prefix)
bindir         ?= $(exec_prefix)/bin
sbindir        ?= $(exec_prefix)/sbin
libdir         ?= $(exec_prefix)/lib
includedir     ?= $(prefix)/include
datarootdir    ?= $(prefix)/share
datadir        ?= $(datarootdir)
sysconfdir     ?= $(prefix)/etc
pkgconfigdir   ?= $(libdir)/pkgconfig
redismoduledir ?= $(libdir)/redis/modules
# nginx's modules directory (Debian's nginx: --modules-path=/usr/lib/nginx/modules)
# and where Debian keeps the snippets that load them (modules-available).
nginxmoduledir ?= $(libdir)/nginx/modules
nginxconfdir   ?= $(datadir)/nginx/modules-available
mandir         ?= $(datarootdir)/man
systemdunitdir ?= $(prefix)/lib/systemd/system

INSTALL_ENV = BUILD='$(BUILD)' DESTDIR='$(DESTDIR)' VERSION='$(VERSION)' \
    SONAME='$(SONAME)' prefix='$(prefix)' bindir='$(bindir)' \
    sbindir='$(sbindir)' libdir='$(libdir)' includedir='$(includedir)' \
    datadir='$(datadir)' sysconfdir='$(sysconfdir)' \
    pkgconfigdir='$(pkgconfigdir)' redismoduledir='$(redismoduledir)' \
    nginxmoduledir='$(nginxmoduledir)' nginxconfdir='$(nginxconfdir)' \
    systemdunitdir='$(systemdunitdir)' mandir='$(mandir)'

.PHONY: install uninstall deb
install: all
	$(INSTALL_ENV) sh scripts/install.sh install

uninstall:
	$(INSTALL_ENV) sh scripts/install.sh uninstall

# dpkg-buildpackage -b on a copy of the tree, then lintian (scripts/deb.sh).
deb:
	scripts/deb.sh --force
