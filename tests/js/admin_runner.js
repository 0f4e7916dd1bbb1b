#!/usr/bin/env node
// Runs a list of KafkaJS admin operations against one broker and prints their results.
//
//   node admin_runner.js BOOTSTRAP < operations.json
//
// stdin: a JSON list of {"op": "<KafkaJS admin method>", "args": [positional arguments]},
// e.g. [{"op": "createTopics", "args": [{"topics": [{"topic": "t", "replicaAssignment":
// [{"partition": 0, "replicas": [1]}]}]}]}, {"op": "describeCluster"}].
// stdout: one JSON list, one entry per operation, in order:
//   {"op": ..., "ok": true, "result": <what KafkaJS returned>} or
//   {"op": ..., "ok": false, "error": {"name", "type", "code", "message", "errors": [...]}}.
// A failed operation does not stop the ones after it. KafkaJS's own log goes to stderr.
// Exit code 0 when every operation ran (whatever its outcome), 2 on bad input, 1 otherwise.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = []
    process.stdin.on('data', chunk => chunks.push(chunk))
    process.stdin.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    process.stdin.on('error', reject)
  })
}

// KafkaJS logs through console.log by default, which would mix with the JSON on stdout.
const stderrLogCreator = () => ({ namespace, level, log }) => {
  process.stderr.write(`${logLevel[level] || level} ${namespace}: ${JSON.stringify(log)}\n`)
}

function describeError(error) {
  const out = {
    name: error.name,
    type: error.type === undefined ? null : error.type,
    code: error.code === undefined ? null : error.code,
    message: error.message,
  }
  if (Array.isArray(error.errors)) {
    out.errors = error.errors.map(describeError)
  }
  return out
}

// Buffers (e.g. in describeConfigs answers) and bigints are not JSON: print them as strings.
function jsonable(_key, value) {
  if (typeof value === 'bigint') return value.toString()
  if (value && value.type === 'Buffer' && Array.isArray(value.data)) {
    return Buffer.from(value.data).toString('utf8')
  }
  return value
}

async function main() {
  const bootstrap = process.argv[2]
  if (!bootstrap) {
    process.stderr.write('usage: admin_runner.js BOOTSTRAP < operations.json\n')
    process.exit(2)
  }
  let operations
  try {
    operations = JSON.parse(await readStdin())
  } catch (error) {
    process.stderr.write(`admin_runner.js: stdin is not JSON: ${error.message}\n`)
    process.exit(2)
  }
  if (!Array.isArray(operations)) {
    process.stderr.write('admin_runner.js: stdin must be a JSON list of operations\n')
    process.exit(2)
  }
  const kafka = new Kafka({
    clientId: 'oncelog-kafkajs-admin',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator,
    retry: { retries: 2, initialRetryTime: 100 },
  })
  const admin = kafka.admin()
  await admin.connect()
  const results = []
  try {
    for (const { op, args = [] } of operations) {
      if (typeof admin[op] !== 'function') {
        results.push({ op, ok: false, error: { name: 'UnknownOperation', type: null, code: null,
          message: `KafkaJS admin has no method ${op}` } })
        continue
      }
      try {
        const result = await admin[op](...args)
        results.push({ op, ok: true, result: result === undefined ? null : result })
      } catch (error) {
        results.push({ op, ok: false, error: describeError(error) })
      }
    }
  } finally {
    await admin.disconnect()
  }
  process.stdout.write(JSON.stringify(results, jsonable) + '\n')
}

main().catch(error => {
  process.stderr.write(`admin_runner.js: ${error.stack || error}\n`)
  process.exit(1)
})
