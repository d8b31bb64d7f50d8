// The official RocketMQ Node.js client against a cluster with authentication and TLS on: with the
// right access key and secret, over TLS verified against the test CA, a producer sends a message
// and a SimpleConsumer receives and acks it; with a wrong secret the send is refused.
// Usage: node auth_tls.js ENDPOINT TOPIC GROUP ACCESS_KEY SECRET_KEY CA_FILE.
// Exit 0 when every check held, 1 otherwise.
'use strict';
const [endpoints, topic, group, accessKey, accessSecret, ca] = process.argv.slice(2);
// gRPC reads its default trust roots from here: set before the client makes a channel.
process.env.GRPC_DEFAULT_SSL_ROOTS_FILE_PATH = ca;
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

function fail(why) {
  console.error(`FAIL: ${why}`);
  process.exit(1);
}

async function send(secret, body) {
  const producer = new Producer({ endpoints, sslEnabled: true, sessionCredentials: { accessKey, accessSecret: secret } });
  try {
    await producer.startup();
    return (await producer.send({ topic, tag: 'tls', keys: [body], body: Buffer.from(body) })).messageId;
  } finally {
    await producer.shutdown().catch(() => {});
  }
}

async function main() {
  if (!ca) fail('usage: node auth_tls.js ENDPOINT TOPIC GROUP ACCESS_KEY SECRET_KEY CA_FILE');
  const body = `node-tls-${Date.now()}`;
  const id = await send(accessSecret, body);
  console.error(`sent ${id} signed, over TLS`);
  const consumer = new SimpleConsumer({
    consumerGroup: group,
    endpoints,
    sslEnabled: true,
    sessionCredentials: { accessKey, accessSecret },
    subscriptions: new Map().set(topic, '*'),
    awaitDuration: 3000,
  });
  await consumer.startup();
  const deadline = Date.now() + 30000;
  let got = null;
  while (!got) {
    if (Date.now() > deadline) fail('the message sent over TLS was not received in 30 s');
    for (const m of await consumer.receive(16, 15000)) {
      if (m.body.toString() === body) got = m;
    }
  }
  await consumer.ack(got);
  console.error('received and acked it');
  let refused = null;
  try {
    await send(`${accessSecret}-wrong`, 'wrong secret');
  } catch (e) {
    refused = e;
  }
  if (!refused) fail('a send with a wrong secret succeeded');
  const text = String(refused && refused.stack ? refused.stack : refused);
  if (!/40100|nauthori|wrong signature/.test(text)) fail(`refused, but not as unauthorized: ${text}`);
  console.error(`a send with a wrong secret was refused: ${text.split('\n')[0]}`);
  console.error('PASS');
  process.exit(0);
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
