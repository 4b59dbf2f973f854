/*
 * sockcat - a plain BSD-socket program for the siw VM, to run under
 * LD_PRELOAD=librspreload.so (which intercepts accept but not accept4,
 * the call OpenBSD's nc -l makes).
 *
 *   sockcat -l ADDR PORT    accept one connection on ADDR:PORT
 *   sockcat ADDR PORT       connect to ADDR:PORT
 *
 * It copies stdin to the connection, then shuts down its writing side,
 * and the connection to stdout until EOF, as nc -N does.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	exit(1);
}

int main(int argc, char **argv)
{
	int listen_mode = argc == 4 && !strcmp(argv[1], "-l");
	struct sockaddr_in sin = { .sin_family = AF_INET };
	char buf[65536];
	int fd, s, in_open = 1, net_open = 1;

	if (argc != 3 + listen_mode) {
		fprintf(stderr, "usage: sockcat [-l] ADDR PORT\n");
		return 2;
	}
	if (inet_pton(AF_INET, argv[1 + listen_mode], &sin.sin_addr) != 1) {
		fprintf(stderr, "sockcat: bad address\n");
		return 2;
	}
	sin.sin_port = htons(atoi(argv[2 + listen_mode]));
	if ((s = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		die("socket");
	if (listen_mode) {
		if (bind(s, (struct sockaddr *) &sin, sizeof sin) || listen(s, 1))
			die("bind/listen");
		if ((fd = accept(s, NULL, NULL)) < 0)
			die("accept");
		close(s);
	} else {
		if (connect(s, (struct sockaddr *) &sin, sizeof sin))
			die("connect");
		fd = s;
	}
	while (net_open) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = 0, .events = POLLIN } };
		ssize_t n;

		if (poll(p, in_open ? 2 : 1, -1) < 0)
			die("poll");
		if (p[0].revents) {
			n = read(fd, buf, sizeof buf);
			if (n < 0)
				die("read socket");
			if (n == 0)
				net_open = 0;
			else if (write(1, buf, n) != n)
				die("write stdout");
		}
		if (in_open && p[1].revents) {
			n = read(0, buf, sizeof buf);
			if (n < 0)
				die("read stdin");
			if (n == 0) {
				in_open = 0;
				if (shutdown(fd, SHUT_WR))
					die("shutdown");
			}
			for (ssize_t off = 0; off < n; ) {
				ssize_t k = write(fd, buf + off, n - off);
				if (k < 0)
					die("write socket");
				off += k;
			}
		}
	}
	if (close(fd))
		die("close");
	return 0;
}
