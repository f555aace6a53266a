// A Curator lock holder for distlock's interoperability tests: takes Apache Curator's
// InterProcessMutex, or the read or write side of its InterProcessReadWriteLock, on a ZooKeeper
// path, and inside each hold runs the critical-section protocol that distlock's testkit runs too
// (crates/distlock-testkit/src/section.rs), so an overlap between any two holders, Java or Rust,
// is seen by one of them.
//
// Usage:
//   CuratorHolder CONNECT PATH MODE ITERATIONS DIR HOLD_MS [--until-line] [--session-ms N]
//                 [--acquire-timeout-ms N]
//     CONNECT     ZooKeeper connect string (127.0.0.1:2181 or host:port,host:port)
//     PATH        the lock's path (/C/N)
//     MODE        mutex | read | write
//     ITERATIONS  how many times to acquire, run the section and release
//     DIR         the directory of the shared critical-section protocol
//     HOLD_MS     how long each hold lasts inside the section
//     --until-line         instead of HOLD_MS, hold until a line arrives on stdin (or it closes)
//     --session-ms N       ZooKeeper session timeout asked for (default 10000)
//     --acquire-timeout-ms N  give up (error) when a lock is not acquired within N (default 60000)
//
// Standard output, one event a line: `connected`, `waiting` (about to acquire), `acquired NODE`
// (our lock node's name, e.g. _c_<uuid>-lock-0000000003), `shared` (a reader found another
// reader inside with it), `overlap REASON`, `released`, `done N`, `error MESSAGE`.
// Exit status: 0 when all went well, 2 if any overlap was seen, 1 on any other error.
//
// The protocol, in DIR:
//   counter           decimal count of exclusive sections completed
//   inside-writer     exists while an exclusive holder is inside; created with O_EXCL
//   inside-reader-ID  one per shared holder inside
// Exclusive (mutex, write): create inside-writer exclusively (it exists: overlap); any reader
// marker: overlap; read the counter; hold; any reader marker or a counter that moved: overlap;
// write counter + 1 (a temporary file renamed over it); delete inside-writer if we made it.
// Shared (read): create inside-reader-ID; inside-writer exists: overlap; another reader marker:
// shared; hold; check both again; delete our marker.

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorHolder {
    static final String COUNTER = "counter";
    static final String WRITER = "inside-writer";
    static final String READER_PREFIX = "inside-reader-";

    static boolean overlapped = false;

    public static void main(String[] args) {
        int status;
        try {
            status = run(args);
        } catch (Throwable t) {
            say("error " + oneLine(t));
            status = 1;
        }
        System.out.flush();
        // Curator's and ZooKeeper's threads would keep the JVM alive.
        System.exit(status);
    }

    static int run(String[] args) throws Exception {
        if (args.length < 6) {
            throw new IllegalArgumentException(
                "usage: CuratorHolder CONNECT PATH MODE ITERATIONS DIR HOLD_MS [--until-line] "
                    + "[--session-ms N] [--acquire-timeout-ms N]");
        }
        String connect = args[0];
        String path = args[1];
        String mode = args[2];
        int iterations = Integer.parseInt(args[3]);
        Path dir = Paths.get(args[4]);
        long holdMs = Long.parseLong(args[5]);
        boolean untilLine = false;
        int sessionMs = 10000;
        long acquireTimeoutMs = 60000;
        for (int i = 6; i < args.length; i++) {
            switch (args[i]) {
                case "--until-line": untilLine = true; break;
                case "--session-ms": sessionMs = Integer.parseInt(args[++i]); break;
                case "--acquire-timeout-ms": acquireTimeoutMs = Long.parseLong(args[++i]); break;
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }

        CuratorFramework client = CuratorFrameworkFactory.newClient(
            connect, sessionMs, 5000, new ExponentialBackoffRetry(100, 10));
        client.start();
        try {
            if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("could not connect to ZooKeeper at " + connect);
            }
            say("connected");
            InterProcessMutex lock;
            boolean exclusive;
            switch (mode) {
                case "mutex": lock = new InterProcessMutex(client, path); exclusive = true; break;
                case "read": lock = new InterProcessReadWriteLock(client, path).readLock(); exclusive = false; break;
                case "write": lock = new InterProcessReadWriteLock(client, path).writeLock(); exclusive = true; break;
                default: throw new IllegalArgumentException("mode must be mutex, read or write, not " + mode);
            }
            BufferedReader stdin = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (int i = 0; i < iterations; i++) {
                say("waiting");
                if (!lock.acquire(acquireTimeoutMs, TimeUnit.MILLISECONDS)) {
                    throw new IllegalStateException("not acquired within " + acquireTimeoutMs + " ms");
                }
                String node = lockPath(lock);
                say("acquired " + node.substring(node.lastIndexOf('/') + 1));
                try {
                    if (exclusive) {
                        Exclusive section = Exclusive.enter(dir);
                        hold(untilLine, holdMs, stdin);
                        section.leave();
                    } else {
                        Shared section = Shared.enter(dir);
                        hold(untilLine, holdMs, stdin);
                        section.leave();
                    }
                } finally {
                    lock.release();
                    say("released");
                }
            }
            say("done " + iterations);
        } finally {
            client.close();
        }
        return overlapped ? 2 : 0;
    }

    static void hold(boolean untilLine, long holdMs, BufferedReader stdin) throws Exception {
        if (untilLine) {
            stdin.readLine(); // a line, or null when stdin closes
        } else {
            Thread.sleep(holdMs);
        }
    }

    /** Our lock node's path: InterProcessMutex.getLockPath() is protected, so by reflection. */
    static String lockPath(InterProcessMutex lock) throws Exception {
        Method m = InterProcessMutex.class.getDeclaredMethod("getLockPath");
        m.setAccessible(true);
        return (String) m.invoke(lock);
    }

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void overlap(String reason) {
        overlapped = true;
        say("overlap " + reason);
    }

    static String oneLine(Throwable t) {
        return (t.getClass().getSimpleName() + ": " + t.getMessage()).replace('\n', ' ');
    }

    static List<String> readers(Path dir) throws IOException {
        List<String> found = new ArrayList<>();
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir, READER_PREFIX + "*")) {
            for (Path entry : entries) {
                found.add(entry.getFileName().toString());
            }
        }
        return found;
    }

    static long readCounter(Path dir) throws IOException {
        try {
            String text = new String(Files.readAllBytes(dir.resolve(COUNTER)), StandardCharsets.UTF_8);
            return Long.parseLong(text.trim());
        } catch (NoSuchFileException e) {
            return 0;
        }
    }

    static void writeCounter(Path dir, long value) throws IOException {
        Path tmp = dir.resolve(COUNTER + ".tmp-" + UUID.randomUUID());
        Files.write(tmp, (value + "\n").getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, dir.resolve(COUNTER), StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }

    static final class Exclusive {
        final Path dir;
        final boolean ownsMarker;
        final long counter;

        Exclusive(Path dir, boolean ownsMarker, long counter) {
            this.dir = dir;
            this.ownsMarker = ownsMarker;
            this.counter = counter;
        }

        static Exclusive enter(Path dir) throws IOException {
            boolean owns = true;
            try {
                Files.createFile(dir.resolve(WRITER));
            } catch (FileAlreadyExistsException e) {
                owns = false;
                overlap("another exclusive holder is inside");
            }
            List<String> readers = readers(dir);
            if (!readers.isEmpty()) {
                overlap("readers are inside: " + readers);
            }
            return new Exclusive(dir, owns, readCounter(dir));
        }

        void leave() throws IOException {
            List<String> readers = readers(dir);
            if (!readers.isEmpty()) {
                overlap("readers came inside: " + readers);
            }
            long now = readCounter(dir);
            if (now != counter) {
                overlap("the counter moved from " + counter + " to " + now + " while held");
            }
            writeCounter(dir, counter + 1);
            if (ownsMarker) {
                Files.delete(dir.resolve(WRITER));
            }
        }
    }

    static final class Shared {
        final Path dir;
        final Path marker;
        boolean sawOther = false;

        Shared(Path dir, Path marker) {
            this.dir = dir;
            this.marker = marker;
        }

        static Shared enter(Path dir) throws IOException {
            Path marker = Files.createFile(dir.resolve(READER_PREFIX + UUID.randomUUID()));
            Shared section = new Shared(dir, marker);
            section.check();
            return section;
        }

        void check() throws IOException {
            if (Files.exists(dir.resolve(WRITER))) {
                overlap("an exclusive holder is inside");
            }
            List<String> others = readers(dir);
            others.remove(marker.getFileName().toString());
            sawOther |= !others.isEmpty();
        }

        void leave() throws IOException {
            check();
            Files.delete(marker);
            if (sawOther) {
                say("shared");
            }
        }
    }
}
