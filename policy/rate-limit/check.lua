-- One atomic evaluation of every counting rule of one limiter check: the twin of evaluate.ts.
-- Guarantees: bans suppress counting; a limit rule that is exceeded stops the loop; peek writes nothing;
-- a distinct set holds at most limit + 1 values;
-- every written key gets a TTL (PEXPIRE … NX on each write: a new key, or one left without a TTL, gets
-- one; a key that has one is not rewritten, so replicas see no extra writes). Needs Redis >= 7.0.
-- Assumes: "now" is ARGV[1] (the caller's wall clock, ms), not Redis TIME, so the TS reference, the
-- memory store and this script decide on the same clock; KEYS come in pairs (counter, ban) per rule.
-- ARGV: now, cost, mode ('check'|'peek'), n, then per rule: action, limit, windowEndMs, banMs, distinct ('1'|'0'), member
local now = tonumber(ARGV[1])
local cost = ARGV[2]
local costNumber = tonumber(cost)
-- Integer costs (the common case) take INCRBY, several times cheaper than INCRBYFLOAT; a counter
-- that already holds a fraction makes INCRBY fail, and then INCRBYFLOAT counts it.
local integerCost = string.find(cost, '^%d+$') ~= nil
-- Integral numbers go back as integer replies (no string formatting); fractions as exact strings.
local function reply(x)
  if x == math.floor(x) and x > -9007199254740992 and x < 9007199254740992 then return x end
  return string.format('%.17g', x)
end
local counting = ARGV[3] == 'check'
local n = tonumber(ARGV[4])
local slack = 1000
local out = {}
for i = 1, n do
  local a = 4 + (i - 1) * 6
  local action = ARGV[a + 1]
  local limit = tonumber(ARGV[a + 2])
  local windowEnd = tonumber(ARGV[a + 3])
  local banMs = tonumber(ARGV[a + 4])
  local distinct = ARGV[a + 5] == '1'
  local member = ARGV[a + 6]
  local ckey = KEYS[(i - 1) * 2 + 1]
  local bkey = KEYS[(i - 1) * 2 + 2]
  local banUntil = 0
  if banMs > 0 then
    banUntil = tonumber(redis.call('GET', bkey) or '0') or 0
    -- A ban lasts ban_for_s (as evaluate.ts): an end further off than that was written by a gateway
    -- whose clock runs ahead, and would be every other gateway's Retry-After.
    if banUntil > now + banMs then banUntil = now + banMs end
  end
  local count, exceeded, banned, resetAt
  if banUntil > now then
    if distinct then count = redis.call('SCARD', ckey) else count = tonumber(redis.call('GET', ckey) or '0') end
    exceeded = 1
    banned = 1
    resetAt = banUntil
  else
    local ttl = windowEnd + slack - now
    if ttl < 1 then ttl = 1 end
    if distinct then
      -- A set already past its limit takes no new value (as evaluate.ts): client-chosen values
      -- must not grow it with every request; the verdict is the same, its count stops at limit + 1.
      count = redis.call('SCARD', ckey)
      if count <= limit then
        if counting then
          if redis.call('SADD', ckey, member) == 1 then count = count + 1 end
          redis.call('PEXPIRE', ckey, ttl, 'NX')
        else
          count = count + 1 - redis.call('SISMEMBER', ckey, member)
        end
      end
    else
      if counting then
        if integerCost then
          count = redis.pcall('INCRBY', ckey, cost)
          if type(count) == 'table' then count = tonumber(redis.call('INCRBYFLOAT', ckey, cost)) end
        else
          count = tonumber(redis.call('INCRBYFLOAT', ckey, cost))
        end
        redis.call('PEXPIRE', ckey, ttl, 'NX')
      else
        count = tonumber(redis.call('GET', ckey) or '0') + costNumber
      end
    end
    exceeded = 0
    banned = 0
    resetAt = windowEnd
    if count > limit then
      exceeded = 1
      if banMs > 0 then
        banned = 1
        resetAt = now + banMs
        if counting then redis.call('SET', bkey, string.format('%.0f', resetAt), 'PX', banMs) end
      end
    end
  end
  -- Flat reply: count, exceeded, banned, resetAt per evaluated rule.
  out[#out + 1] = reply(count)
  out[#out + 1] = exceeded
  out[#out + 1] = banned
  out[#out + 1] = reply(resetAt)
  if exceeded == 1 and action == 'limit' then break end
end
return out
