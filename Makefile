# ratel — one GNU Makefile.
#
#   make            libratel.a, libratel.so and the ratel CLI in build/
#   make test       the whole suite (unit, property, CLI, fuzz smoke)
#   make asan       the suite built with AddressSanitizer + UBSan
#   make valgrind   the unit suite under valgrind (errors and leaks fatal)
#   make bench      benchmarks; prints figures and ratios to peers
#   make fuzz       longer libFuzzer runs of every parser (FUZZ_SECONDS=60)
#   make clean
#
# CC, CFLAGS, BUILD and SANITIZE are overridable.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wpointer-arith -Wvla -Werror
BASE     := -std=gnu11 -fPIC -fvisibility=hidden -pthread $(WARN)
CPPFLAGS += -Iinclude -Isrc -D_GNU_SOURCE
SANITIZE ?=
# Link-time optimisation lets the decision path inline across the core's
# files (about a quarter faster). Fat objects keep libratel.a usable by
# linkers without LTO. `make LTO=` turns it off.
LTO      ?= -flto=auto -ffat-lto-objects
AR       := $(if $(LTO),gcc-ar,ar)
ALL_CFLAGS = $(BASE) $(CFLAGS) $(SANITIZE) $(LTO)
LDLIBS   += -pthread

LIB_SRC   := $(sort $(wildcard src/core/*.c src/store/*.c))
CLI_SRC   := $(sort $(wildcard cli/*.c))
UNIT_SRC  := $(sort $(wildcard tests/unit/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ   := $(CLI_SRC:%.c=$(BUILD)/%.o)
UNIT_OBJ  := $(UNIT_SRC:%.c=$(BUILD)/%.o)
HEADERS   := $(wildcard include/*.h src/*/*.h cli/*.h tests/unit/*.h)

.PHONY: all test asan valgrind bench fuzz clean format
all: $(BUILD)/libratel.a $(BUILD)/libratel.so $(BUILD)/ratel

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libratel.a: $(LIB_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/libratel.so: $(LIB_OBJ)
	$(CC) $(ALL_CFLAGS) -shared -o $@ $^ $(LDLIBS)

$(BUILD)/ratel: $(CLI_OBJ) $(BUILD)/libratel.a
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/test_unit: $(UNIT_OBJ) $(BUILD)/libratel.a
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

# Fuzz targets: a standalone driver (tests/fuzz/driver.c, random and mutated
# inputs) links with any compiler; `make fuzz` uses clang's libFuzzer.
$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/driver.c $(BUILD)/libratel.a
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

FUZZ_BINS := $(patsubst tests/fuzz/fuzz_%.c,$(BUILD)/fuzz_%,$(filter tests/fuzz/fuzz_%.c,$(FUZZ_SRC)))

$(BUILD)/bench_%: bench/bench_%.c $(BUILD)/libratel.a
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -O2 -o $@ $^ $(LDLIBS)

BENCH_BINS := $(patsubst bench/bench_%.c,$(BUILD)/bench_%,$(BENCH_SRC))

test: all $(BUILD)/test_unit $(FUZZ_BINS)
	BUILD=$(BUILD) tests/run.sh

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 LTO= \
	    SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" test

valgrind: $(BUILD)/test_unit $(BUILD)/ratel
	BUILD=$(BUILD) tests/valgrind.sh

bench: all $(BENCH_BINS)
	BUILD=$(BUILD) bench/run.sh

fuzz:
	FUZZ_SECONDS=$${FUZZ_SECONDS:-60} tests/fuzz/libfuzzer.sh

format:
	clang-format -i include/*.h src/*/*.[ch] cli/*.[ch] tests/*/*.[ch] bench/*.c

clean:
	rm -rf build build-asan build-fuzz

# The main job until rateld exists: replay the bundled trace through a
# policy and draw the chart.
.PHONY: demo
demo: all
	BUILD=$(BUILD) scripts/demo.sh
