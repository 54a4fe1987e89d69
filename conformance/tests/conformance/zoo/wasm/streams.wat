;; A per-stream caching policy for the zoo: each allocation gets a chunk of its own (sizes up to
;; 1 MiB rounded up to a power of two, at least 256 B; larger ones to 256 B); a freed chunk is
;; kept in a cache of up to 1024 entries, each tagged with the stream it was freed on: one free
;; list per stream, in one table. A request takes a cached chunk of its class from its own
;; stream's list first, else steals one from another stream's list, else asks upstream (and,
;; refused, gives the whole cache back and asks again). `$bug` (BUG, set by the test) selects
;; how it steals:
;;   0 orders first: emm::stream_order(freed on, requested on) must answer 0, else it skips
;;     the entry (the control)
;;   1 steals without ordering
;;   2 steals the smallest class (256 B) without ordering, orders the others
;; Memory: the cache at 4096, 32 bytes an entry (chunk i32, class i64 at +8, stream i64 at
;; +16, align i64 at +24; chunk 0: empty); by chunk handle h, its class (an i64 at
;; 65536 + 8h) and alignment (an i64 at 196608 + 8h).
(module
  (import "emm" "upstream_alloc" (func $upstream_alloc (param i64 i64) (result i32)))
  (import "emm" "upstream_free" (func $upstream_free (param i32) (result i32)))
  (import "emm" "stream_order" (func $stream_order (param i64 i64) (result i32)))
  (memory (export "memory") 6)
  (global $bug i32 (i32.const BUG))
  (func (export "emm_abi_version") (result i32) (i32.const 1))
  (func (export "emm_buffer") (param i32) (result i32) (i32.const 2048))
  (func (export "emm_init") (param i32 i32) (result i32) (i32.const 0))
  (func $entry (param $i i32) (result i32)
    (i32.add (i32.const 4096) (i32.shl (local.get $i) (i32.const 5))))
  (func $class (param $size i64) (result i64)
    (if (i64.le_u (local.get $size) (i64.const 256)) (then (return (i64.const 256))))
    (if (i64.gt_u (local.get $size) (i64.const 1048576))
      (then (return (i64.and (i64.add (local.get $size) (i64.const 255)) (i64.const -256)))))
    (i64.shl (i64.const 1)
      (i64.sub (i64.const 64) (i64.clz (i64.sub (local.get $size) (i64.const 1))))))
  ;; Whether entry $e may go to a request on $stream: the same stream, or another one this
  ;; policy orders (or, with its bug, does not).
  (func $may_take (param $e i32) (param $stream i64) (param $steal i32) (result i32)
    (local $from i64)
    (local.set $from (i64.load offset=16 (local.get $e)))
    (if (i64.eq (local.get $from) (local.get $stream)) (then (return (i32.eqz (local.get $steal)))))
    (if (i32.eqz (local.get $steal)) (then (return (i32.const 0))))
    (if (i32.eq (global.get $bug) (i32.const 1)) (then (return (i32.const 1))))
    (if (i32.and (i32.eq (global.get $bug) (i32.const 2))
                 (i64.eq (i64.load offset=8 (local.get $e)) (i64.const 256)))
      (then (return (i32.const 1))))
    (i32.eqz (call $stream_order (local.get $from) (local.get $stream))))
  ;; A cached chunk of class $class and alignment ≥ $align for $stream (0: none), taken off
  ;; the cache: its own stream's list first, then the others'.
  (func $take (param $class i64) (param $align i64) (param $stream i64) (result i32)
    (local $i i32)
    (local $e i32)
    (local $steal i32)
    (local $h i32)
    (loop $pass
      (local.set $i (i32.const 0))
      (block $done
        (loop $next
          (br_if $done (i32.ge_u (local.get $i) (i32.const 1024)))
          (local.set $e (call $entry (local.get $i)))
          (local.set $h (i32.load (local.get $e)))
          (if (i32.and (i32.ne (local.get $h) (i32.const 0))
                (i32.and (i64.eq (i64.load offset=8 (local.get $e)) (local.get $class))
                         (i64.ge_u (i64.load offset=24 (local.get $e)) (local.get $align))))
            (then
              (if (call $may_take (local.get $e) (local.get $stream) (local.get $steal))
                (then
                  (i32.store (local.get $e) (i32.const 0))
                  (return (local.get $h))))))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $next)))
      (local.set $steal (i32.add (local.get $steal) (i32.const 1)))
      (br_if $pass (i32.eq (local.get $steal) (i32.const 1))))
    (i32.const 0))
  ;; Gives every cached chunk back; whether there was any.
  (func $flush (result i32)
    (local $i i32)
    (local $e i32)
    (local $any i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (i32.const 1024)))
        (local.set $e (call $entry (local.get $i)))
        (if (i32.load (local.get $e))
          (then
            (drop (call $upstream_free (i32.load (local.get $e))))
            (i32.store (local.get $e) (i32.const 0))
            (local.set $any (i32.const 1))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $any))
  (func (export "emm_alloc") (param $size i64) (param $align i64) (param $stream i64) (result i64)
    (local $class i64)
    (local $h i32)
    (local.set $class (call $class (local.get $size)))
    (local.set $h (call $take (local.get $class) (local.get $align) (local.get $stream)))
    (if (i32.eqz (local.get $h))
      (then
        (local.set $h (call $upstream_alloc (local.get $class) (local.get $align)))
        (if (i32.lt_s (local.get $h) (i32.const 0))
          (then
            (if (call $flush)
              (then (local.set $h (call $upstream_alloc (local.get $class) (local.get $align)))))))
        (if (i32.lt_s (local.get $h) (i32.const 0))
          (then (return (i64.extend_i32_s (local.get $h)))))
        (i64.store (i32.add (i32.const 65536) (i32.shl (local.get $h) (i32.const 3))) (local.get $class))
        (i64.store (i32.add (i32.const 196608) (i32.shl (local.get $h) (i32.const 3))) (local.get $align))))
    (i64.shl (i64.extend_i32_u (local.get $h)) (i64.const 40)))
  (func (export "emm_free") (param $chunk i32) (param $offset i64) (param $size i64) (param $stream i64) (result i32)
    (local $i i32)
    (local $e i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (i32.const 1024)))
        (local.set $e (call $entry (local.get $i)))
        (if (i32.eqz (i32.load (local.get $e)))
          (then
            (i32.store (local.get $e) (local.get $chunk))
            (i64.store offset=8 (local.get $e)
              (i64.load (i32.add (i32.const 65536) (i32.shl (local.get $chunk) (i32.const 3)))))
            (i64.store offset=16 (local.get $e) (local.get $stream))
            (i64.store offset=24 (local.get $e)
              (i64.load (i32.add (i32.const 196608) (i32.shl (local.get $chunk) (i32.const 3)))))
            (return (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    ;; The cache is full: the chunk goes back.
    (drop (call $upstream_free (local.get $chunk)))
    (i32.const 0))
  (func (export "emm_reset") (result i32)
    (drop (call $flush))
    (i32.const 0)))
