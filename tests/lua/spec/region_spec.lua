-- Regions: a state whose heap lives in a far-memory region with a small
-- local cache. Needs userfaultfd (root, or vm.unprivileged_userfaultfd=1):
-- skipped without it.
local fmem = require "fmem"

local here = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "tests/lua"
local f = assert(io.open(here .. "/gc_churn.lua", "rb"))
local churn = f:read("a")
f:close()
local churn_sum = load(churn)()

local pool = fmem.open("mem:?size=128M")
local probe_ok, probe_err = pcall(fmem.region, "1M", {pool = pool})
if probe_ok then probe_err:close() end

-- the whole message (busted's error_matches trims "chunk:line:" prefixes)
local function error_of(fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  return err
end
local function raises_like(pattern, fn) assert.matches(pattern, error_of(fn)) end

local function used() return pool:stats().allocated_bytes end

describe("regions", function()
  if not probe_ok then
    pending("no regions here: " .. tostring(probe_err))
    return
  end

  it("take their size and cache options", function()
    local r = pool:region("8M", {cache = "25%"})
    local s = r:stats()
    assert.are.equal(8 * 1024 * 1024, r:size())
    assert.are.equal(2 * 1024 * 1024, s.cache_bytes)
    assert.is_false(r:busy())
    assert.matches("^fmem%.region %(8388608 bytes%)$", tostring(r))
    r:close()
    assert.are.equal("fmem.region (closed)", tostring(r))
    local r2 = fmem.region(4 * 1024 * 1024, {pool = pool, cache = 1024 * 1024})
    assert.are.equal(1024 * 1024, r2:stats().cache_bytes)
    r2:close()
  end)

  it("report each node's backend with pool:node_stats", function()
    local p = fmem.open("mem:?size=16M;zmem:?size=16M")
    local r = p:region("4M", {cache = "1M"})
    local st = fmem.newstate(r)
    st:dostring("t = {} for i = 1, 20000 do t[i] = string.rep('x', 100) .. i end")
    r:flush()
    local mem, z = p:node_stats(0), p:node_stats(1)
    assert.are.equal("mem", mem.kind)
    assert.are.equal("zmem", z.kind)
    assert.are.equal(16 * 1024 * 1024, mem.capacity_bytes)
    assert.truthy(z.writes > 0 and z.bytes_written > 0 and z.held_bytes > 0,
                  "zmem wrote " .. z.bytes_written .. ", holds " .. z.held_bytes)
    assert.truthy(z.compression_ratio > 1, "ratio " .. z.compression_ratio)
    assert.are.equal(0, z.errors)
    assert.are.equal("", z.last_error)
    assert.has_error(function() p:node_stats(2) end)
    assert.has_error(function() p:node_stats(-1) end)
    assert.are.equal("x200", st:dostring("return t[200]:sub(-4)"))
    st:close()
    r:close()
    p:close()
  end)

  it("show their paths and parameters in stats", function()
    local striped = fmem.open("mem:?size=16M&nodes=4&bw=4G")
    local r = striped:region("4M", {cache = "1M"})
    local st = fmem.newstate(r)
    st:dostring("CHURN_ROUNDS = 2")
    assert.are.equal(load(churn)(2), st:dostring(churn, "=gc_churn"))
    local s = r:stats()
    assert.are.equal(4, s.paths)
    assert.are.equal(4, s.stripe_width)
    assert.are.equal(0, s.tier_moves) -- memory nodes only: no tiers
    assert.truthy(s.io_width >= 1 and s.io_width <= 16, "io_width " .. s.io_width)
    assert.truthy(s.prefetch_units >= 0)
    assert.truthy(s.fetch_max >= 1 and s.fetch_units >= 1 and s.fetch_units <= s.fetch_max,
                  "fetch " .. s.fetch_units .. " of " .. s.fetch_max)
    assert.are.equal(4, #s.path_stats)
    -- the region's total and its paths' counters are two reads while the
    -- writer may still be writing back: they must agree once it is quiet
    local written, used_nodes
    for _ = 1, 50 do
      r:flush()
      s = r:stats()
      written, used_nodes = 0, 0
      for i, p in ipairs(s.path_stats) do
        assert.are.equal(i - 1, p.node)
        written = written + p.bytes_written
        if p.chunks > 0 then used_nodes = used_nodes + 1 end
      end
      if written == s.bytes_written then break end
    end
    assert.truthy(written > 0)
    assert.are.equal(s.bytes_written, written)
    assert.truthy(used_nodes >= 2, "chunks on " .. used_nodes .. " nodes")
    st:close()
    r:close()
    striped:close()
  end)

  it("hold a GC-heavy state with half of it cached", function()
    local before = used()
    local r = pool:region("16M", {cache = "50%"})
    local st = fmem.newstate(r)
    assert.is_true(r:busy())
    assert.are.equal(churn_sum, st:dostring(churn, "=gc_churn"))
    local s = st:stats()
    assert.are.equal("region", s.backing)
    assert.are.equal(0, s.hooks.spills)
    assert.truthy(s.region.faults > 0)
    assert.truthy(used() > before)
    st:close()
    assert.is_false(r:busy())
    assert.are.equal(before, used(), "closing the state frees its region space")
    r:close()
    assert.are.equal(before, used())
  end)

  it("evict and fetch back when the cache is small", function()
    -- a short run: thrashing a 1 MiB cache is slow by design
    local r = pool:region("16M", {cache = "1M"})
    local st = fmem.newstate(r)
    st:dostring("CHURN_ROUNDS = 4")
    assert.are.equal(load(churn)(4), st:dostring(churn, "=gc_churn"))
    local s = r:stats()
    assert.truthy(s.evictions > 0, "evictions " .. s.evictions)
    assert.truthy(s.fetches > 0, "fetches " .. s.fetches)
    st:close()
    r:close()
  end)

  it("hold one state at a time and can be reused", function()
    local r = pool:region("8M")
    local st = fmem.newstate(r)
    raises_like("^fmem: newstate: the region already holds a state$",
                function() fmem.newstate(r) end)
    st:close()
    local st2 = fmem.newstate(r)
    assert.are.equal(2, st2:dostring("return 1 + 1"))
    st2:close()
    r:close()
    raises_like("^fmem: newstate: the region is closed$", function() fmem.newstate(r) end)
  end)

  it("outlive their close() while a state is in them", function()
    local before = used()
    local r = pool:region("8M")
    local st = fmem.newstate(r)
    r:close()
    st:dostring("t = {} for i = 1, 1e4 do t[i] = tostring(i) end")
    assert.are.equal(10000, st:dostring("return #t"))
    st:close()
    assert.are.equal(before, used())
  end)
end)
