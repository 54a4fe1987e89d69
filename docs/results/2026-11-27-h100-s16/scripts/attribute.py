"""Instructions an op, instruction by instruction, of the replay loop (the pool inlined into it).

    CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_TARGET_DIR=target/prof \
        cargo build --release -p emm-core --example prof_w3
    MONO=1 VMM=1 valgrind --tool=callgrind --dump-instr=yes --compress-pos=no \
        --compress-strings=no --callgrind-out-file=/tmp/callg target/prof/release/examples/prof_w3 w3 3
    python3 attribute.py /tmp/callg target/prof/release/examples/prof_w3 4000000 > annot.txt

The last argument is the ops replayed (warm-up plus passes: 4 × 1 000 000 for `w3 3`). Each line
of the output is the instruction's executions an op, its address and its text; a `call`'s count
includes the callee's instructions (callgrind's inclusive cost on the call's line)."""
import collections, re, subprocess, sys

callg, binary, ops = sys.argv[1], sys.argv[2], float(sys.argv[3])
count = collections.Counter()
ob = fn = None
for line in open(callg):
    if line.startswith("ob="):
        ob = line[3:].strip()
    elif line.startswith("fn="):
        fn = line[3:].strip()
    elif line.startswith("0x") and ob and ob.endswith(binary.split("/")[-1]):
        if fn and "replay_with" in fn:
            parts = line.split()
            if len(parts) >= 3:
                count[int(parts[0], 16)] += int(parts[2])
if not count:
    sys.exit("no instructions of replay_with found")
lo, hi = min(count), max(count) + 16
dis = subprocess.run(
    ["objdump", "-d", "--no-show-raw-insn", "-C", binary,
     f"--start-address={lo:#x}", f"--stop-address={hi:#x}"],
    capture_output=True, text=True, check=True).stdout
total = 0.0
for line in dis.splitlines():
    m = re.match(r"\s*([0-9a-f]+):\s*(.*)", line)
    if m:
        c = count.get(int(m.group(1), 16), 0) / ops
        total += c
        if c >= 0.005:
            print(f"{c:8.3f} {m.group(1)} {m.group(2)}")
print(f"{total:8.1f} instructions an op in replay_with")
