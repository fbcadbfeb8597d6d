-- fmem.compact(state): sparse slabs of a far-memory Lua state's heap are
-- merged; the state's data survives; the bytes given back are counted.
local fmem = require "fmem"

local function error_of(fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  return err
end

describe("compact", function()
  local name = string.format("fmem-compact-lua-%d-%d", os.time(), math.random(1, 1 << 30))
  local p = fmem.open("shm:/" .. name .. "?size=128M")

  it("merges sparse slabs and keeps the state's data", function()
    local st = fmem.newstate(p)
    -- many small strings and tables; keep one in seven
    st:dostring([[
      local all = {}
      for i = 1, 60000 do
        all[i] = (i % 2 == 0) and {i, tostring(i)} or ("s" .. i .. string.rep("x", i % 40))
      end
      keep = {}
      for i = 1, 60000, 7 do keep[#keep + 1] = all[i] end
      all = nil
      function check()
        local n = 0
        for k, v in ipairs(keep) do
          local i = 1 + (k - 1) * 7
          if i % 2 == 0 then
            if v[1] ~= i or v[2] ~= tostring(i) then return false, i end
          elseif v ~= "s" .. i .. string.rep("x", i % 40) then return false, i end
          n = n + 1
        end
        return true, n
      end
    ]])
    st:collect()
    local before = st:stats().heap
    local got = fmem.compact(st)
    local after = st:stats().heap
    assert.is_true(got > 0)
    assert.are.equal(got, after.reclaimed_bytes - before.reclaimed_bytes)
    assert.is_true(after.merges > before.merges)
    assert.is_true(after.remote_bytes <= before.remote_bytes - got)
    local ok, n = st:call("check")
    assert.is_true(ok, n)
    assert.are.equal(math.ceil(60000 / 7), n)
    -- the state keeps working: allocate, collect, check again
    st:dostring("for i = 1, 20000 do local t = {i} end")
    st:collect()
    assert.is_true((st:call("check")))
    assert.are.equal(0, st:compact(1)) -- a budget too small for any merge
    st:close()
  end)

  it("refuses bad arguments and heaps it cannot compact", function()
    local st = fmem.newstate(p)
    assert.matches("budget", error_of(function() fmem.compact(st, -1) end))
    assert.is_true(#error_of(function() fmem.compact(p) end) > 0)
    st:close()
    assert.matches("closed", error_of(function() fmem.compact(st) end))
    local m = fmem.open("mem:?size=16M")
    local sm = fmem.newstate(m)
    assert.matches("does not support", error_of(function() fmem.compact(sm) end))
    sm:close()
    m:close()
  end)

  it("leaves no pool file behind", function()
    p:close()
    os.remove("/dev/shm/" .. name)
    os.remove("/dev/shm/" .. name .. ".data")
  end)
end)
