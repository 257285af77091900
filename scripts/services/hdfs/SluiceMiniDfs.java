// HDFS for Sluice's tests: one NameNode (RPC on 127.0.0.1:9000) and a few
// DataNodes in one JVM, from Hadoop's MiniDFSCluster. Started and stopped by
// scripts/services.sh; compiled there with javac against the classpath that
// pom.xml beside this file resolves.
//
// Usage: java -cp CLASSES:JARS SluiceMiniDfs BASEDIR READY_FILE
//
// Storage lives under BASEDIR (MiniDFSCluster's hdfs.minidfs.basedir). The
// file system is formatted only on the first start (BASEDIR/formatted marks
// it done), so a restart keeps what was written. When the cluster is up, the client
// configuration is written to BASEDIR/core-site.xml, "ready" is printed, and
// READY_FILE is written; then the process stays up until it is killed
// (SIGTERM shuts the cluster down cleanly).
//
// Settings (system properties, all optional):
//   sluice.hdfs.port       NameNode RPC port (9000)
//   sluice.hdfs.http.port  NameNode HTTP/WebHDFS port (9870; 0 = any free port)
//   sluice.hdfs.webhdfs    true to serve WebHDFS on that port (false)
//   sluice.hdfs.datanodes  number of DataNodes (2)

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public final class SluiceMiniDfs {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: SluiceMiniDfs BASEDIR READY_FILE");
            System.exit(2);
        }
        File baseDir = new File(args[0]).getAbsoluteFile();
        File readyFile = new File(args[1]).getAbsoluteFile();
        int port = Integer.getInteger("sluice.hdfs.port", 9000);
        int httpPort = Integer.getInteger("sluice.hdfs.http.port", 9870);
        int dataNodes = Integer.getInteger("sluice.hdfs.datanodes", 2);
        readyFile.delete();

        // Written after the first start that formatted the file system: from
        // then on the NameNode's metadata and the DataNodes' blocks are reused.
        File formatted = new File(baseDir, "formatted");
        boolean existing = formatted.isFile();

        Configuration conf = new HdfsConfiguration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, baseDir.getPath());
        conf.set("dfs.replication", "1");
        conf.set("dfs.blocksize", "16777216"); // 16 MiB: small test files
        conf.set("dfs.permissions.enabled", "false");
        conf.set("hadoop.security.authentication", "simple");
        // WebHDFS costs 5-10 s of startup (Jersey scans the 100 MB jar for its
        // resources): off unless asked for.
        conf.setBoolean("dfs.webhdfs.enabled", Boolean.getBoolean("sluice.hdfs.webhdfs"));
        // Loopback only: MiniDFSCluster binds DataNodes to 127.0.0.1 already.
        conf.set("dfs.namenode.http-address", "127.0.0.1:" + httpPort);
        conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
        conf.set("dfs.namenode.servicerpc-bind-host", "127.0.0.1");
        conf.set("dfs.namenode.http-bind-host", "127.0.0.1");
        // Leave safe mode as soon as the blocks are reported after a restart.
        conf.set("dfs.namenode.safemode.extension", "0");
        // A client that lost its NameNode should not wait minutes between tries.
        conf.set("ipc.client.connect.max.retries", "3");

        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
                .nameNodePort(port)
                .nameNodeHttpPort(httpPort)
                .numDataNodes(dataNodes)
                .format(!existing)
                .manageNameDfsDirs(true)
                .manageDataDfsDirs(true)
                .waitSafeMode(true)
                .build();
        cluster.waitActive();
        cluster.waitClusterUp();

        if (!existing) {
            Files.write(formatted.toPath(), "1\n".getBytes(StandardCharsets.UTF_8));
        }

        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.out.println("shutting down");
            // DataNodes first, then the NameNode, each on its own: a failure
            // of the one (Hadoop's own shutdown hooks racing ours) must not
            // skip the other.
            try {
                cluster.shutdownDataNodes();
            } catch (Throwable t) {
                System.out.println("shutting down the datanodes: " + t);
            }
            try {
                cluster.shutdownNameNodes();
            } catch (Throwable t) {
                System.out.println("shutting down the namenode: " + t);
            }
            System.out.println("shut down");
        }, "sluice-minidfs-shutdown"));

        Configuration client = new Configuration(false);
        client.set("fs.defaultFS", "hdfs://localhost:" + port);
        client.set("dfs.replication", "1");
        try (OutputStream out = new FileOutputStream(new File(baseDir, "core-site.xml"))) {
            client.writeXml(out);
        }

        String line = "ready: hdfs://localhost:" + cluster.getNameNodePort()
                + " (" + dataNodes + " datanodes, " + (existing ? "existing data" : "formatted") + ")";
        File tmp = new File(readyFile.getPath() + ".tmp");
        Files.write(tmp.toPath(), (line + "\n").getBytes(StandardCharsets.UTF_8));
        Files.move(tmp.toPath(), readyFile.toPath(), StandardCopyOption.ATOMIC_MOVE);
        System.out.println(line);
        System.out.flush();

        // Stay up until killed.
        Thread.currentThread().join();
    }
}
