package org.pglease;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketAddress;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import javax.net.SocketFactory;

/**
 * Lets the PostgreSQL JDBC driver connect over a Unix socket (Java 16+ Unix-domain
 * channels; the driver itself speaks TCP only).  Debian's default authentication for
 * local connections is peer, which needs one:
 * {@code jdbc:postgresql://localhost:5432/mydb?socketFactory=org.pglease.UnixSocketFactory&socketFactoryArg=/var/run/postgresql}
 * connects to {@code /var/run/postgresql/.s.PGSQL.5432}, the socket libpq's
 * {@code host=/var/run/postgresql port=5432} names.  The argument may also be the
 * socket file itself.  The worker builds such a URL from a libpq one
 * ({@link Session#jdbcUrl(String)}).  Read timeouts ({@code socketTimeout}) are not
 * supported over it.
 */
public final class UnixSocketFactory extends SocketFactory {
    private final String where;

    /** The socket directory (libpq's host=/dir) or the socket file. */
    public UnixSocketFactory(String where) {
        this.where = where;
    }

    @Override
    public Socket createSocket() {
        return new UnixSocket(where);
    }

    @Override
    public Socket createSocket(String host, int port) throws IOException {
        Socket s = createSocket();
        s.connect(InetSocketAddress.createUnresolved(host, port));
        return s;
    }

    @Override
    public Socket createSocket(String host, int port, java.net.InetAddress localHost, int localPort)
        throws IOException {
        return createSocket(host, port);
    }

    @Override
    public Socket createSocket(java.net.InetAddress host, int port) throws IOException {
        return createSocket(host.getHostAddress(), port);
    }

    @Override
    public Socket createSocket(java.net.InetAddress address, int port, java.net.InetAddress localAddress,
                               int localPort) throws IOException {
        return createSocket(address, port);
    }

    /** A java.net.Socket over a Unix-domain SocketChannel: what the driver uses of one. */
    private static final class UnixSocket extends Socket {
        private final String where;
        private SocketChannel channel;
        private InputStream in;
        private OutputStream out;
        private int soTimeout;
        private boolean closed;

        UnixSocket(String where) {
            this.where = where;
        }

        @Override
        public void connect(SocketAddress endpoint, int timeout) throws IOException {
            int port = endpoint instanceof InetSocketAddress ? ((InetSocketAddress) endpoint).getPort() : 5432;
            Path path = Path.of(where);
            if (!path.getFileName().toString().startsWith(".s.PGSQL.")) {
                path = path.resolve(".s.PGSQL." + port);
            }
            SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            try {
                ch.connect(UnixDomainSocketAddress.of(path));
            } catch (IOException e) {
                ch.close();
                throw new IOException("could not connect to the Unix socket " + path + ": " + e.getMessage(), e);
            }
            channel = ch;
            in = Channels.newInputStream(ch);
            out = Channels.newOutputStream(ch);
        }

        @Override
        public void connect(SocketAddress endpoint) throws IOException {
            connect(endpoint, 0);
        }

        @Override
        public InputStream getInputStream() throws IOException {
            if (in == null) {
                throw new IOException("not connected");
            }
            return in;
        }

        @Override
        public OutputStream getOutputStream() throws IOException {
            if (out == null) {
                throw new IOException("not connected");
            }
            return out;
        }

        @Override
        public boolean isConnected() {
            return channel != null;
        }

        @Override
        public boolean isBound() {
            return channel != null;
        }

        @Override
        public boolean isClosed() {
            return closed;
        }

        @Override
        public synchronized void close() throws IOException {
            closed = true;
            if (channel != null) {
                channel.close();
            }
        }

        @Override
        public void shutdownInput() throws IOException {
            channel.shutdownInput();
        }

        @Override
        public void shutdownOutput() throws IOException {
            channel.shutdownOutput();
        }

        // TCP options mean nothing on a Unix socket: accepted and ignored.
        @Override
        public void setTcpNoDelay(boolean on) {
        }

        @Override
        public boolean getTcpNoDelay() {
            return true;
        }

        @Override
        public void setKeepAlive(boolean on) {
        }

        @Override
        public boolean getKeepAlive() {
            return false;
        }

        @Override
        public void setReceiveBufferSize(int size) {
        }

        @Override
        public void setSendBufferSize(int size) {
        }

        @Override
        public synchronized void setSoTimeout(int timeout) {
            soTimeout = timeout;
        }

        @Override
        public synchronized int getSoTimeout() {
            return soTimeout;
        }

        @Override
        public void setSoLinger(boolean on, int linger) {
        }

        @Override
        public String toString() {
            return "UnixSocket[" + where + "]";
        }
    }
}
