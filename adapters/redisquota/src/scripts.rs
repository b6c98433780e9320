//! The Lua script: one call (`EVALSHA`) allocates every allocation of a batch, atomically, so
//! a request with several descriptors or quotas costs one round trip. On `NOSCRIPT` (Redis
//! restarted or flushed) the client loads the script and retries once; nothing ran.
//!
//! Time is the Redis server's (`TIME`, microseconds, read once per call), never the mixer's:
//! replicas sharing one Redis then agree on windows and refills whatever their clocks say.
//! Redis 5+ replicates the scripts' effects, so a script may read `TIME` before writing.
//!
//! Allocation `i` (from 0) has `KEYS[2i+1]`, the counter, and `KEYS[2i+2]`, the deduplication
//! record, and eight `ARGV` from `8i+1`: the algorithm (`fw`, `rw`, `tb`), maxAmount,
//! validDuration (µs), bucketDuration (µs), amount, how to take it (`0` a check, `1` a check
//! with best effort, `c` a report's charge: counted whole even past the limit), deduplication
//! time (ms; 0: no deduplication id), and the minimum remaining a check needs (0: none). The answer is five integers per allocation, in order:
//! `granted, valid duration µs, deduplicated 1/0, remaining, reset µs` (remaining: units still
//! grantable after this call; reset: until the counter is back to the full limit).

use mixer_adapter_quota_common::Algorithm;

const HEAD: &str = r#"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
"#;

/// The start of one allocation's function: its arguments, the deduplication record.
const PROLOGUE: &str = r#"
local max = tonumber(ARGV[a + 2])
local valid = tonumber(ARGV[a + 3])
local bucket = tonumber(ARGV[a + 4])
local amount = tonumber(ARGV[a + 5])
local best = ARGV[a + 6] == '1'
local charge = ARGV[a + 6] == 'c'
local dedup_ms = tonumber(ARGV[a + 7])
local minimum = tonumber(ARGV[a + 8])
if dedup_ms > 0 then
  local prev = redis.call('HMGET', kd, 'granted', 'expires', 'remaining', 'reset')
  if prev[1] and prev[2] then
    local left = tonumber(prev[2]) - now
    if left < 0 then left = 0 end
    local reset = tonumber(prev[4] or now) - now
    if reset < 0 then reset = 0 end
    return {tonumber(prev[1]), left, 1, tonumber(prev[3] or 0), reset}
  end
end
local function grant(available)
  if charge then return amount end
  if available < minimum then return 0 end
  if amount <= available then return amount end
  if best and available > 0 then return available end
  return 0
end
local granted = 0
local valid_for = valid
local remaining = 0
local reset = 0
"#;

/// The window starts at the first allocation and ends `valid` later (as Istio's).
const FIXED_WINDOW: &str = r#"
local st = redis.call('HMGET', kc, 'used', 'end')
local used = tonumber(st[1])
local wend = tonumber(st[2])
if not used or not wend or now >= wend then
  used = 0
  wend = now + valid
end
granted = grant(max - used)
redis.call('HSET', kc, 'used', string.format('%d', used + granted), 'end', string.format('%d', wend))
redis.call('PEXPIRE', kc, math.ceil((wend - now) / 1000))
valid_for = wend - now
remaining = max - used - granted
reset = wend - now
"#;

/// A hash of bucket index (server time / bucket) to units; buckets that left the window are
/// deleted as they are met.
const ROLLING_WINDOW: &str = r#"
local n = math.ceil(valid / bucket)
local cur = math.floor(now / bucket)
local all = redis.call('HGETALL', kc)
local total = 0
local oldest = nil
local newest = nil
local stale = {}
for i = 1, #all, 2 do
  local idx = tonumber(all[i])
  if idx + n <= cur then
    stale[#stale + 1] = all[i]
  else
    total = total + tonumber(all[i + 1])
    if not oldest or idx < oldest then oldest = idx end
    if not newest or idx > newest then newest = idx end
  end
end
if #stale > 0 then redis.call('HDEL', kc, unpack(stale)) end
granted = grant(max - total)
if granted > 0 then
  redis.call('HINCRBY', kc, string.format('%d', cur), granted)
  newest = cur
  if not oldest then oldest = cur end
elseif oldest then
  valid_for = (oldest + n) * bucket - now
end
remaining = max - total - granted
if oldest then reset = (oldest + n) * bucket - now end
if newest then
  redis.call('PEXPIRE', kc, math.ceil(((newest + n) * bucket - now) / 1000))
end
"#;

/// Tokens (fractional) and when they were counted; full at first.
const TOKEN_BUCKET: &str = r#"
if max > 0 then
  local rate = max / valid
  local st = redis.call('HMGET', kc, 'tokens', 'at')
  local tokens = tonumber(st[1])
  local at = tonumber(st[2])
  if not tokens or not at then
    tokens = max
  else
    local elapsed = now - at
    if elapsed < 0 then elapsed = 0 end
    tokens = math.min(max, tokens + elapsed * rate)
  end
  granted = grant(math.floor(tokens + 1e-9))
  tokens = tokens - granted
  -- A charge may leave the bucket in debt, paid back by refill before the next check.
  if tokens < 0 and not charge then tokens = 0 end
  local needed = math.max(amount, minimum)
  if granted > 0 then
    valid_for = math.ceil(granted / rate)
  elseif needed <= max then
    valid_for = math.max(0, math.ceil((needed - tokens) / rate))
  end
  redis.call('HSET', kc, 'tokens', string.format('%.17g', tokens), 'at', string.format('%d', now))
  redis.call('PEXPIRE', kc, math.ceil((max - tokens) / rate / 1000) + 1)
  remaining = math.floor(tokens + 1e-9)
  reset = math.ceil((max - tokens) / rate)
else
  granted = grant(0)
end
"#;

const EPILOGUE: &str = r#"
if dedup_ms > 0 then
  redis.call('HSET', kd, 'granted', string.format('%d', granted), 'expires', string.format('%d', now + valid_for),
    'remaining', string.format('%d', remaining), 'reset', string.format('%d', now + reset))
  redis.call('PEXPIRE', kd, dedup_ms)
end
return {granted, math.floor(valid_for), 0, remaining, math.floor(reset)}
"#;

/// The script: one function per algorithm, and a loop over the batch.
pub fn source() -> String {
    let mut out = String::from(HEAD);
    for algorithm in Algorithm::ALL {
        let body = match algorithm {
            Algorithm::FixedWindow => FIXED_WINDOW,
            Algorithm::RollingWindow => ROLLING_WINDOW,
            Algorithm::TokenBucket => TOKEN_BUCKET,
        };
        out.push_str(&format!(
            "local function {}(kc, kd, a)\n{PROLOGUE}{body}{EPILOGUE}end\n",
            function(algorithm)
        ));
    }
    out.push_str(LOOP);
    out
}

/// The batch: each allocation's five answers, in order.
const LOOP: &str = r#"
local algorithms = {fw = alloc_fw, rw = alloc_rw, tb = alloc_tb}
local out = {}
for i = 0, #KEYS / 2 - 1 do
  local a = 8 * i
  local r = algorithms[ARGV[a + 1]](KEYS[2 * i + 1], KEYS[2 * i + 2], a)
  for j = 1, 5 do out[#out + 1] = r[j] end
end
return out
"#;

fn function(algorithm: Algorithm) -> String {
    format!("alloc_{}", algorithm.tag())
}
