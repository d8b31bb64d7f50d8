// The official RocketMQ Node.js client against a RockRaft cluster: a producer sends three
// messages, a SimpleConsumer receives them, gives the first a new invisible time (whose new
// receipt handle must differ), and acks all three; then nothing is left to receive.
// Usage: node consume.js ENDPOINT TOPIC GROUP. Exit 0 when every check held, 1 otherwise.
'use strict';
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

function fail(why) {
  console.error(`FAIL: ${why}`);
  process.exit(1);
}

async function main() {
  const [endpoints, topic, group] = process.argv.slice(2);
  if (!group) fail('usage: node consume.js ENDPOINT TOPIC GROUP');
  const producer = new Producer({ endpoints });
  await producer.startup();
  const sent = new Map();
  for (let i = 0; i < 3; i++) {
    const body = `node-${i}-${Date.now()}`;
    const receipt = await producer.send({ topic, tag: 'node', keys: [body], body: Buffer.from(body) });
    sent.set(receipt.messageId, body);
    console.error(`sent ${receipt.messageId}`);
  }
  const consumer = new SimpleConsumer({
    consumerGroup: group,
    endpoints,
    subscriptions: new Map().set(topic, 'node'),
    awaitDuration: 3000,
  });
  await consumer.startup();
  const acked = new Set();
  let changed = false;
  const deadline = Date.now() + 40000;
  while (acked.size < sent.size) {
    if (Date.now() > deadline) fail(`acked ${acked.size} of ${sent.size} messages in 40 s`);
    for (const m of await consumer.receive(16, 20000)) {
      if (sent.get(m.messageId) !== m.body.toString()) fail(`unexpected message ${m.messageId}`);
      if (m.deliveryAttempt !== 1) fail(`delivery attempt ${m.deliveryAttempt} on a first delivery`);
      if (!changed) {
        const before = m.receiptHandle;
        await consumer.changeInvisibleDuration(m, 5000);
        if (!m.receiptHandle || m.receiptHandle === before) fail('ChangeInvisibleDuration kept the receipt handle');
        changed = true;
      }
      await consumer.ack(m);
      acked.add(m.messageId);
      console.error(`received and acked ${m.messageId}`);
    }
  }
  const rest = await consumer.receive(16, 20000);
  if (rest.length > 0) fail(`${rest.length} message(s) delivered again after being acked`);
  console.error('PASS');
  // The client's log stream complains when closed at exit; the verdict is in.
  process.exit(0);
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
