// Curator's InterProcessMutex in a loop, as scripts/zk-vs-curator.py runs it beside `distlock
// bench`: WORKERS threads share one CuratorFramework (one ZooKeeper session, as distlock's client
// shares one), each taking and releasing its own lock (uncontended) or all the same one
// (contended) for SECONDS, counted from when every worker has made one cycle. Prints the
// acquisitions made in that time.
//
//     java -cp CLASSPATH CuratorBench CONNECT PREFIX WORKERS SECONDS uncontended|contended

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String prefix = args[1];
        int workers = Integer.parseInt(args[2]);
        long nanos = Long.parseLong(args[3]) * 1_000_000_000L;
        boolean contended = args[4].equals("contended");
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            connect, 30_000, 15_000, new ExponentialBackoffRetry(100, 3));
        client.start();
        client.blockUntilConnected();
        long pid = ProcessHandle.current().pid();
        AtomicLong counted = new AtomicLong();
        CountDownLatch ready = new CountDownLatch(workers);
        CountDownLatch go = new CountDownLatch(1);
        AtomicLong start = new AtomicLong();
        Thread[] threads = new Thread[workers];
        for (int w = 0; w < workers; w++) {
            String path = contended ? prefix + "/one" : prefix + "/" + pid + "-" + w;
            InterProcessMutex mutex = new InterProcessMutex(client, path);
            threads[w] = new Thread(() -> {
                try {
                    // One cycle each before the clock starts: the lock's parent exists and the
                    // classes are loaded, as distlock's workers have connected.
                    mutex.acquire();
                    mutex.release();
                    ready.countDown();
                    go.await();
                    long until = start.get() + nanos;
                    while (System.nanoTime() < until) {
                        mutex.acquire();
                        mutex.release();
                        if (System.nanoTime() < until) {
                            counted.incrementAndGet();
                        }
                    }
                } catch (Exception e) {
                    e.printStackTrace();
                    System.exit(1);
                }
            });
        }
        for (Thread t : threads) t.start();
        ready.await();
        start.set(System.nanoTime());
        go.countDown();
        for (Thread t : threads) t.join();
        client.close();
        System.out.println(counted.get());
    }
}
