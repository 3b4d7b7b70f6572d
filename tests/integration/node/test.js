// test.js - ratel's module, Lua script and Lua Functions library called
// from Node through ioredis, a client library of another ecosystem, against
// a real redis-server.
//
//   node test.js PORT [path/to/build/lua]
//
// tests/integration/test_node.sh starts the server (module loaded) and runs
// this with ioredis on NODE_PATH. Prints "ok NAME" or "FAIL NAME: why" per
// check, then "# N checks"; the shell script tallies them. Time is injected
// with AT at instants near the server's present (keys would expire at once
// otherwise); nothing sleeps.
'use strict';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const Redis = require('ioredis');

const port = Number(process.argv[2]);
const luaDir = process.argv[3] || path.join(__dirname, '..', '..', '..', 'build', 'lua');
const source = fs.readFileSync(path.join(luaDir, 'ratel.eval.lua'), 'utf8');
const library = fs.readFileSync(path.join(luaDir, 'ratel.lib.lua'), 'utf8');

let checks = 0;

// check NAME, async fn: ok unless fn throws (an assertion or a reply error).
async function check(name, fn) {
  checks++;
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    const why = String(e && e.message ? e.message : e).replace(/\s+/g, ' ').slice(0, 300);
    console.log(`FAIL ${name}: ${why}`);
  }
}

// rejects PROMISE, TEXT: the call fails with an ioredis ReplyError whose
// message contains TEXT.
async function rejects(promise, text) {
  let err = null;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `no error; wanted one containing ${JSON.stringify(text)}`);
  assert.ok(err instanceof Redis.ReplyError, `${err.name} is not a ReplyError: ${err.message}`);
  assert.ok(err.message.includes(text), `${JSON.stringify(err.message)} lacks ${JSON.stringify(text)}`);
}

async function main() {
  const redis = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, connectTimeout: 5000 });
  const acquire = (...args) => redis.call('RATEL.ACQUIRE', ...args);
  const [sec, usec] = await redis.time();
  // One instant near the server's present; every test key lives for hours.
  const T = Number(sec) * 1000 + Math.floor(Number(usec) / 1000) + 1000;

  // ------------------------------------------------------------ the module
  await check('module_loaded', async () => {
    const mods = await redis.call('MODULE', 'LIST');
    assert.ok(JSON.stringify(mods).includes('"ratel"'), JSON.stringify(mods));
  });
  await check('acquire_first', async () => {
    assert.deepEqual(await acquire('n:sms', 'AT', T, '1/60s', '10/1d'), [1, 1, 0, 0, 86400000, 0, 0]);
  });
  await check('acquire_denied', async () => {
    assert.deepEqual(await acquire('n:sms', 'AT', T + 1, '1/60s', '10/1d'), [0, 1, 0, 59999, 86399999, 0, 0]);
  });
  await check('retry_after_exact', async () => {
    const [allowed, , , retry] = await acquire('n:sms', 'AT', T + 1, '1/60s', '10/1d');
    assert.deepEqual([allowed, retry], [0, 59999]);
    // One millisecond early is still denied, by exactly 1 ms; on time passes.
    assert.deepEqual(await acquire('n:sms', 'AT', T + 59999, '1/60s', '10/1d'), [0, 1, 0, 1, 86399999 - 59998, 0, 0]);
    assert.deepEqual(await acquire('n:sms', 'AT', T + 1 + retry, '1/60s', '10/1d'), [1, 1, 0, 0, 86400000, 0, 0]);
  });
  await check('key_expires_at_reset', async () => {
    assert.equal(Number(await redis.call('PEXPIRETIME', 'n:sms')), T + 60000 + 86400000);
  });
  await check('cost_limit_remaining', async () => {
    assert.deepEqual(await acquire('n:c', 'COST', 3, 'AT', T, '5/1s'), [1, 5, 2, 0, 1000, 0, 0]);
    assert.deepEqual(await acquire('n:c', 'COST', 3, 'AT', T, '5/1s'), [0, 5, 2, 1000, 1000, 0, 0]);
  });
  await check('refund', async () => {
    assert.deepEqual(await redis.call('RATEL.REFUND', 'n:c', 'COST', 2, 'AT', T, '5/1s'), [1, 5, 4, 0, 1000, 0, 0]);
  });
  await check('peek_writes_nothing', async () => {
    const before = await redis.getBuffer('n:c');
    assert.deepEqual(await acquire('n:c', 'PEEK', 'AT', T, '5/1s'), [1, 5, 4, 0, 1000, 0, 0]);
    assert.ok(before.equals(await redis.getBuffer('n:c')));
  });
  await check('info', async () => {
    const info = await redis.call('RATEL.INFO', 'n:c', 'AT', T);
    assert.deepEqual(info, [['rule', '5/1s', 'algo', 'sliding', 'used', 1, 'remaining', 4,
      'reset_after_ms', 1000, 'runs', 1, 'granularity_ms', 1]]);
    assert.deepEqual(await redis.call('RATEL.INFO', 'n:none'), []);
  });
  await check('reset', async () => {
    assert.equal(await redis.call('RATEL.RESET', 'n:c'), 1);
    assert.equal(await redis.call('RATEL.RESET', 'n:c'), 0);
    assert.equal(await redis.exists('n:c'), 0);
  });
  await check('gcra_reservation', async () => {
    assert.deepEqual(await acquire('n:g', 'MAXWAIT', 5000, 'AT', T, '1/1s:gcra'), [1, 1, 0, 0, 1000, 0, 0]);
    assert.deepEqual(await acquire('n:g', 'MAXWAIT', 5000, 'AT', T, '1/1s:gcra'), [1, 1, 0, 0, 2000, 0, 1000]);
    assert.deepEqual(await acquire('n:g', 'MAXWAIT', 1000, 'AT', T, '1/1s:gcra'), [0, 1, 0, 2000, 2000, 0, 0]);
  });
  await check('pipeline_in_order', async () => {
    const p = redis.pipeline();
    for (let i = 0; i < 12; i++) p.call('RATEL.ACQUIRE', 'n:p', 'AT', T + i, '10/1m');
    const res = await p.exec();
    assert.ok(res.every(([err]) => err === null), JSON.stringify(res));
    assert.deepEqual(res.map(([, d]) => d[0]).join(''), '111111111100');
    assert.deepEqual(res.map(([, d]) => d[2]), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0]);
  });

  // ----------------------------------------------- errors as ReplyError
  await check('error_bad_rule', () => rejects(acquire('n:e', '10/1x'), 'ERR ratel: rule "10/1x"'));
  await check('error_cost', () => rejects(acquire('n:e', 'COST', 0, '1/1s'),
    'ERR ratel: COST must be an integer from 1 to 1000000000'));
  await check('error_cost_over_rule', () => rejects(acquire('n:e', 'COST', 11, '10/1s'),
    'COST 11 is more than rule 1 ("10/1s") can ever admit (10)'));
  await check('error_unknown_option', () => rejects(acquire('n:e', 'FOO', '1/1s'), 'unknown or repeated option "FOO"'));
  await check('error_arity', () => rejects(acquire('n:e'), 'wrong number of arguments'));
  await check('error_wrongtype', async () => {
    await redis.lpush('n:list', 'x');
    await rejects(acquire('n:list', '1/1s'), 'WRONGTYPE');
  });
  await check('error_not_state', async () => {
    await redis.set('n:str', 'hello');
    await rejects(acquire('n:str', '1/1s'), 'ERR ratel: key holds a value that is not ratel state');
    assert.equal(await redis.get('n:str'), 'hello');
  });
  await check('errors_wrote_nothing', async () => assert.equal(await redis.exists('n:e'), 0));

  // ------------------------------------------------------ the Lua script
  redis.defineCommand('ratel', { numberOfKeys: 1, lua: source });
  await check('script_sha_is_file_sha1', async () => {
    const sha = await redis.script('LOAD', source);
    assert.equal(sha, crypto.createHash('sha1').update(source).digest('hex'));
    assert.deepEqual(await redis.evalsha(sha, 1, 'n:sha', 'ACQUIRE', 'AT', T, '2/1m'), [1, 2, 1, 0, 60000, 0, 0]);
  });
  await check('script_same_reply', async () => {
    assert.deepEqual(await redis.ratel('n:l', 'ACQUIRE', 'AT', T, '1/60s', '10/1d'), [1, 1, 0, 0, 86400000, 0, 0]);
    assert.deepEqual(await redis.ratel('n:l', 'ACQUIRE', 'AT', T + 1, '1/60s', '10/1d'), [0, 1, 0, 59999, 86399999, 0, 0]);
  });
  await check('script_same_bytes_and_expiry', async () => {
    const steps = [[0, 'ACQUIRE'], [5, 'ACQUIRE'], [9, 'ACQUIRE'], [20, 'REFUND'], [30, 'ACQUIRE']];
    for (const [dt, op] of steps) {
      const viaScript = await redis.ratel('n:bs', op, 'AT', T + dt, '3/1m', '20/1h:gcra');
      const viaModule = await redis.call(`RATEL.${op}`, 'n:bm', 'AT', T + dt, '3/1m', '20/1h:gcra');
      assert.deepEqual(viaScript, viaModule, `${op} at +${dt}`);
    }
    assert.ok((await redis.getBuffer('n:bs')).equals(await redis.getBuffer('n:bm')), 'stored bytes differ');
    assert.equal(await redis.call('PEXPIRETIME', 'n:bs'), await redis.call('PEXPIRETIME', 'n:bm'));
  });
  await check('module_key_continued_by_script', async () => {
    // 3/1m: the module takes two, the script the third, then denies.
    await acquire('n:ms', 'AT', T, '3/1m');
    await acquire('n:ms', 'AT', T + 10, '3/1m');
    assert.deepEqual(await redis.ratel('n:ms', 'ACQUIRE', 'AT', T + 20, '3/1m'), [1, 3, 0, 0, 60000, 0, 0]);
    assert.deepEqual(await redis.ratel('n:ms', 'ACQUIRE', 'AT', T + 30, '3/1m'), [0, 3, 0, 59970, 59990, 0, 0]);
    assert.deepEqual(await redis.ratel('n:ms', 'INFO', 'AT', T + 30), await redis.call('RATEL.INFO', 'n:ms', 'AT', T + 30));
  });
  await check('script_key_continued_by_module', async () => {
    // gcra 2/1s, burst 2: the script takes the burst, the module waits
    // exactly one emission interval (500 ms) for the next permit.
    await redis.ratel('n:sm', 'ACQUIRE', 'AT', T, '2/1s:gcra');
    await redis.ratel('n:sm', 'ACQUIRE', 'AT', T, '2/1s:gcra');
    assert.deepEqual(await acquire('n:sm', 'AT', T, '2/1s:gcra'), [0, 2, 0, 500, 1000, 0, 0]);
    assert.deepEqual(await acquire('n:sm', 'AT', T + 500, '2/1s:gcra'), [1, 2, 0, 0, 1000, 0, 0]);
    assert.equal(await redis.ratel('n:sm', 'RESET'), 1);
    assert.equal(await redis.exists('n:sm'), 0);
  });
  await check('script_error_is_reply_error', () =>
    rejects(redis.ratel('n:e', 'ACQUIRE', '10/1x'), 'ratel: rule "10/1x"'));
  await check('script_unknown_operation', () =>
    rejects(redis.ratel('n:e', 'FROB', '1/1s'), 'unknown operation'));
  await check('script_reloaded_after_flush', async () => {
    // ioredis answers NOSCRIPT by sending the script again (EVAL).
    await redis.script('FLUSH');
    assert.deepEqual(await redis.ratel('n:f', 'ACQUIRE', 'AT', T, '1/1s'), [1, 1, 0, 0, 1000, 0, 0]);
  });

  // ---------------------------------------------------- the library
  // docs/lua.md's ioredis example: FUNCTION LOAD once, then FCALL.
  await check('library_loads', async () =>
    assert.equal(await redis.call('FUNCTION', 'LOAD', 'REPLACE', library), 'ratel'));
  await check('library_same_as_module', async () => {
    const steps = [[0, 'acquire'], [5, 'acquire'], [9, 'acquire'], [20, 'refund'], [30, 'acquire']];
    for (const [dt, op] of steps) {
      const viaLib = await redis.call('FCALL', `ratel_${op}`, 1, 'n:fl', 'AT', T + dt, '3/1m', '20/1h:gcra');
      const viaModule = await redis.call(`RATEL.${op.toUpperCase()}`, 'n:fm', 'AT', T + dt, '3/1m', '20/1h:gcra');
      assert.deepEqual(viaLib, viaModule, `${op} at +${dt}`);
    }
    assert.ok((await redis.getBuffer('n:fl')).equals(await redis.getBuffer('n:fm')), 'stored bytes differ');
    assert.equal(await redis.call('PEXPIRETIME', 'n:fl'), await redis.call('PEXPIRETIME', 'n:fm'));
  });
  await check('library_read_only_info', async () =>
    assert.deepEqual(await redis.call('FCALL_RO', 'ratel_info', 1, 'n:fl', 'AT', T + 30),
      await redis.call('RATEL.INFO', 'n:fm', 'AT', T + 30)));
  await check('library_error_is_reply_error', () =>
    rejects(redis.call('FCALL', 'ratel_acquire', 1, 'n:e', '10/1x'), 'ratel: rule "10/1x"'));

  await redis.quit();
}

main()
  .catch((e) => {
    checks++;
    console.log(`FAIL node_client: ${String(e && e.stack ? e.stack : e).replace(/\s+/g, ' ').slice(0, 300)}`);
  })
  .finally(() => console.log(`# ${checks} checks`));
